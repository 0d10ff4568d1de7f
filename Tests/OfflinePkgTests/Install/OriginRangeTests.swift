import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// File-level updates (SPEC §13) on every kind of origin a publisher hosts on: nginx (several ranges a
/// request), object storage that answers one range a request (S3, GCS and R2 send the whole object to
/// several ranges: nginx with `max_ranges 1`; OSS answers 416: nginx refusing a comma in `Range`), a
/// caching edge in front of the origin, and HTTP/2 over TLS with a private CA. The same releases
/// arrive, with their trees right, for about the bytes of the changed frames and the index delta.
@Suite struct OriginRangeTests {
    enum Origin: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case multipart = "nginx"
        case oneRange = "max_ranges 1"
        case refusesSeveral = "416 on a comma"
        case edge = "caching edge"
        case http2 = "HTTP/2 over TLS"

        var testDescription: String { rawValue }

        /// The origin's `server` config.
        var locations: String {
            switch self {
            case .multipart, .edge: ""
            case .oneRange, .http2: "max_ranges 1;"
            case .refusesSeveral: "if ($http_range ~ \",\") { return 416; }"
            }
        }
    }

    /// A repository of chunked archives with index deltas from every earlier release, on an origin of
    /// one kind (and an edge in front of it for `.edge`).
    final class Rig: @unchecked Sendable {
        let scratch: TemporaryDirectory
        let repo: String
        let origin: NginxServer
        let edge: NginxServer?
        let authority: TestCertificateAuthority?
        var built: [Int: ChunkedArchiveBuilder.Built] = [:]
        var writesIndexDeltas = true
        private var sequence = 0

        init(_ kind: Origin, count: Int = 200) throws {
            scratch = try TemporaryDirectory(prefix: "origin-ranges")
            repo = scratch.path("repo")
            try FileSystem.makeDirectories(repo)
            chmod(scratch.path, 0o755)
            authority = kind == .http2 ? try TestCertificateAuthority() : nil
            origin = try NginxServer(documentRoot: repo, locations: kind.locations, authority: authority, http2: kind == .http2)
            edge =
                kind == .edge
                ? try NginxServer(
                    documentRoot: repo,
                    locations: """
                        location = /manifest.json { proxy_pass \(origin.baseURL.absoluteString.dropLast()); }
                        location / {
                            proxy_pass \(origin.baseURL.absoluteString.dropLast());
                            proxy_cache edge;
                            proxy_cache_valid 200 1h;
                        }
                        """,
                    http: "proxy_cache_path \"PREFIX/cache\" keys_zone=edge:1m;") : nil
        }

        /// The server the device talks to.
        var served: NginxServer { edge ?? origin }
        var manifestURL: URL { served.url("manifest.json") }

        @discardableResult
        func publish(_ version: Int, files: [String: [UInt8]]? = nil) throws -> ChunkedArchiveBuilder.Built {
            let made = try ChunkedArchiveBuilder.build(
                id: "app", version: "\(version).0", routes: ["https://m.example.com/app/"],
                files: files ?? FileFetchTests.files(version: version), site: scratch.path("site-\(version)"), repo: repo)
            if writesIndexDeltas {
                for old in built.values { try ChunkedArchiveBuilder.writeIndexDelta(from: old, to: made, repo: repo) }
            }
            built[version] = made
            sequence += 1
            let path = repo + "/manifest.json"
            try writeManifest(packages: [made.entry], sequence: sequence, to: path)
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(Double(sequence))], ofItemAtPath: path)
            return made
        }

        func sync(_ root: String, events: EventLog = EventLog()) async throws -> SyncReport {
            let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
            var options = Updater.Options(retry: RetryPolicy(attempts: 2, baseDelay: 0.05), events: { events.append($0) })
            options.caBundle = authority?.certificatePath
            return try await Updater(store: store, manifestURL: manifestURL, options: options).sync()
        }
    }

    /// Bytes (headers included) and requests the device's server sent after log line `before`, the
    /// manifest left out.
    static func traffic(_ server: NginxServer, from before: Int) -> (bytes: Int, requests: [AccessLogEntry]) {
        usleep(200_000)
        let lines = server.accessLog().dropFirst(before).filter { $0.uri != "/manifest.json" }
        return (lines.reduce(0) { $0 + $1.bytesSent }, Array(lines))
    }

    /// The frames of `built` whose content `held` lacks, and the delta from `from`'s tree.
    static func ideal(_ rig: Rig, _ built: ChunkedArchiveBuilder.Built, from: ChunkedArchiveBuilder.Built) -> Int64 {
        let delta = FileIndexDelta.url(
            nextTo: built.indexURL, fromTree: FileFetchTests.tree(from), index: String(built.indexURL.dropFirst(6).prefix(64)))
        return FileFetchTests.neededFrames(built, held: FileFetchTests.held(from))
            + (FileSystem.fileSize(rig.repo + "/" + delta) ?? 0)
    }

    @Test(arguments: Origin.allCases)
    func theSameReleasesArriveOnEveryOrigin(kind: Origin) async throws {
        let rig = try Rig(kind)
        let v1 = try rig.publish(1)
        let root = try TemporaryDirectory(prefix: "origin-device")
        #expect(try await rig.sync(root.path).changes.first?.via == .archive)
        for version in 2...6 { try rig.publish(version) }
        let v6 = try #require(rig.built[6])
        let before = rig.served.accessLog().count
        let events = EventLog()
        let report = try await rig.sync(root.path, events: events)
        let change = try #require(report.changes.first)
        #expect(change.via == .files, "\(kind): \(events.all)")
        #expect(change.to == "6.0")
        let layout = CacheLayout(root: root.path)
        #expect(
            try treeHash(of: layout.tree(id: "app", version: "6.0", treeHash: FileFetchTests.tree(v6))) == FileFetchTests.tree(v6)
        )
        let (bytes, requests) = Self.traffic(rig.served, from: before)
        let ideal = Self.ideal(rig, v6, from: v1)
        #expect(
            Double(bytes) <= 1.1 * Double(ideal) + 8192,
            "\(kind): \(bytes) B sent for \(ideal) B of frames and delta: \(requests)")
        // Never the whole index, never the archive.
        #expect(!requests.contains { $0.uri == "/" + v6.indexURL }, "\(kind)")
        #expect(!requests.contains { $0.uri == "/" + v6.archiveURL && $0.status == 200 && $0.method == "GET" }, "\(kind)")
        let ranged = requests.filter { $0.uri == "/" + v6.archiveURL && $0.method == "GET" }
        switch kind {
        case .multipart:
            #expect(ranged.count == 1 && ranged.allSatisfy { $0.status == 206 })
        case .oneRange, .refusesSeveral, .http2:
            // One range a request, no more requests than the changed files (fewer where neighbours merge).
            #expect(ranged.allSatisfy { $0.status == 206 && !($0.range ?? "").contains(",") }, "\(kind): \(ranged)")
            #expect(ranged.count <= FileFetchTests.neededFrames(v6, held: FileFetchTests.held(v1)) / 4096 + 1)
            var status = stat()
            #expect(stat(layout.origins, &status) == 0 && status.st_mode & 0o777 == 0o600)
            #expect(OriginRanges(layout: layout).support(for: rig.served.url(v6.archiveURL)) == .single)
        case .edge:
            #expect(ranged.allSatisfy { $0.status == 206 }, "\(ranged)")
        }
        if kind == .http2 {
            // Every request of the update on one HTTP/2 connection.
            #expect(requests.allSatisfy { $0.serverProtocol == "HTTP/2.0" }, "\(requests)")
            #expect(Set(requests.compactMap(\.connection)).count == 1, "\(requests)")
        }
    }

    enum WrongDelta: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case wrongHash = "a changed file's sha256 is wrong"
        case wrongRange = "a changed file's range is another member's"
        case otherTree = "it starts from another tree"
        case garbled = "it is not a delta"

        var testDescription: String { rawValue }
    }

    /// A delta that is there but wrong: the same sync drops it, fetches the full index, and the release
    /// arrives whole and right.
    @Test(arguments: WrongDelta.allCases)
    func aWrongIndexDeltaFallsBackToTheFullIndexInTheSameSync(wrong: WrongDelta) async throws {
        let rig = try Rig(.multipart)
        rig.writesIndexDeltas = false
        let v1 = try rig.publish(1)
        let root = try TemporaryDirectory(prefix: "origin-wrong-delta")
        _ = try await rig.sync(root.path)
        let v3 = try rig.publish(3)
        let url = try ChunkedArchiveBuilder.writeIndexDelta(from: v1, to: v3, repo: rig.repo) { delta in
            switch wrong {
            case .wrongHash: delta.files[0].sha256 = String(repeating: "0", count: 64)
            case .wrongRange:
                let other = v3.members.first { $0.path != delta.files[0].path.string }!
                delta.files[0].offset = Int64(other.offset)
                delta.files[0].length = Int64(other.length)
            case .otherTree: delta.from = String(repeating: "a", count: 64)
            case .garbled: delta.delete = [PackagePath("not/in/the/tree.js")]
            }
        }
        let before = rig.origin.accessLog().count
        let events = EventLog()
        let report = try await rig.sync(root.path, events: events)
        #expect(report.changes.first?.via == .files, "\(events.all)")
        let refused = events.all.compactMap { if case .indexDeltaFailed(_, _, let error) = $0 { error } else { nil } }
        #expect(refused.count == 1, "\(wrong): \(events.all)")
        let (_, requests) = Self.traffic(rig.origin, from: before)
        #expect(requests.contains { $0.uri == "/" + url && $0.status == 200 })
        #expect(requests.filter { $0.uri == "/" + v3.indexURL }.count == 1, "\(requests)")
        let layout = CacheLayout(root: root.path)
        #expect(
            try treeHash(of: layout.tree(id: "app", version: "3.0", treeHash: FileFetchTests.tree(v3))) == FileFetchTests.tree(v3)
        )
    }

    /// `sync --cacert FILE`: an origin behind a private CA, over HTTP/2; without the CA the certificate
    /// is refused, and a file that is not there is a usage error.
    @Test func syncTrustsAPrivateCAWithCacert() async throws {
        let rig = try Rig(.http2)
        try rig.publish(1)
        let authority = try #require(rig.authority)
        let root = try TemporaryDirectory(prefix: "origin-cacert")
        let url = rig.manifestURL.absoluteString
        let refused = await InProcessCLI.run(["sync", url, "--root", root.path, "--quiet"])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("certificate"), "\(refused.stderr)")
        let missing = await InProcessCLI.run(["sync", url, "--root", root.path, "--cacert", root.path("none.pem")])
        #expect(missing.status == 2, "\(missing.stderr)")
        #expect(missing.stderr.contains("--cacert"), "\(missing.stderr)")
        let synced = await InProcessCLI.run([
            "sync", url, "--root", root.path, "--cacert", authority.certificatePath, "--quiet",
        ])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(rig.origin.accessLog().contains { $0.uri == "/manifest.json" && $0.serverProtocol == "HTTP/2.0" })
    }
}
