import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// When a sync asks for the newest file-index deltas beside the manifest (`EarlyRequests`): never on
/// the common sync that finds nothing new and is answered at once, and for a few packages at most.
@Suite struct EarlyRequestTests {
    /// Five chunked packages, served by a `FaultServer` (its log sees every request, its script holds
    /// answers back) behind nginx speaking HTTP/2 over TLS; a device that synced them all once, and so
    /// remembers the origin speaks HTTP/2.
    final class Rig: @unchecked Sendable {
        let scratch: TemporaryDirectory
        let server: FaultServer
        let front: NginxServer
        let authority: TestCertificateAuthority
        var root: String { scratch.path("root") }

        init(packages: Int) async throws {
            scratch = try TemporaryDirectory(prefix: "early-requests")
            chmod(scratch.path, 0o755)
            let repo = scratch.path("repo")
            try FileSystem.makeDirectories(repo)
            var entries = [[String: Any]]()
            for number in 1...packages {
                let built = try ChunkedArchiveBuilder.build(
                    id: "p\(number)", version: "1.0", routes: ["https://m.example.com/p\(number)/"],
                    files: FileFetchTests.files(version: 1, count: 20, prefix: "p\(number)-"),
                    site: scratch.path("site-\(number)"), repo: repo)
                entries.append(built.entry)
            }
            _ = try writeManifest(packages: entries, sequence: 1, to: repo + "/manifest.json")
            server = try FaultServer(documentRoot: repo)
            authority = try TestCertificateAuthority()
            front = try NginxServer(
                documentRoot: repo,
                locations: "location / { proxy_pass \(server.baseURL.absoluteString.dropLast()); proxy_buffering off; }",
                authority: authority, http2: true)
            #expect(try await sync().changes.count == packages)
        }

        func sync() async throws -> SyncReport {
            let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
            var options = Updater.Options(retry: .init(attempts: 1))
            options.caBundle = authority.certificatePath
            return try await Updater(store: store, manifestURL: front.url("manifest.json"), options: options).sync()
        }

        /// The early delta requests among `requests`.
        static func early(_ requests: some Sequence<RecordedRequest>) -> [RecordedRequest] {
            requests.filter { $0.path.hasPrefix("/files/deltas/") }
        }
    }

    /// The sync a fleet makes almost always: nothing new, the manifest's 304 at once. It makes one
    /// request, however many chunked packages are active: the early requests wait longer than the
    /// answer takes, and are dropped when it comes.
    @Test func aNoOpSyncAnsweredAtOnceMakesOnlyTheManifestRequest() async throws {
        let rig = try await Rig(packages: 3)
        #expect(OriginRanges(layout: CacheLayout(root: rig.root)).http(for: rig.front.url("manifest.json")) == "h2")
        let before = rig.server.requests.count
        let report = try await rig.sync()
        #expect(report.changes.isEmpty)
        let requests = rig.server.requests.dropFirst(before)
        #expect(requests.map(\.path) == ["/manifest.json"] && requests.first?.status == 304, "\(requests.map(\.path))")
    }

    /// A manifest slow to answer on an origin that speaks HTTP/2: the first `maximumPackages` active
    /// packages are asked for early, no more.
    @Test func aSlowManifestAsksEarlyForAFewPackagesAtMost() async throws {
        let rig = try await Rig(packages: EarlyRequests.maximumPackages + 2)
        // Held a second, and until the early requests were answered: their order, not the machine's pace.
        rig.server.script(
            "/manifest.json", [.holdHeadUntil(count: EarlyRequests.maximumPackages, prefix: "/files/deltas/", seconds: 1)])
        let before = rig.server.requests.count
        _ = try await rig.sync()
        let requests = rig.server.requests.dropFirst(before)
        let early = Rig.early(requests)
        #expect(early.count == EarlyRequests.maximumPackages, "\(requests.map(\.path))")
        let manifest = try #require(requests.first { $0.path == "/manifest.json" })
        #expect(early.allSatisfy { $0.answeredAt < manifest.answeredAt }, "\(requests.map(\.path))")
    }
}
