import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// File-level updates (SPEC §13) against nginx: only the frames of the files a device lacks cross the
/// network, whatever the version gap, across packages and from a seed; every way the ranges can fail
/// falls back to the full archive in the same sync, which still activates.
@Suite struct FileFetchTests {
    /// A site of `count` incompressible files of 4–6 KiB (each frame larger than the merge gap, so only
    /// neighbours that both changed are merged); release `version` changes three files of its own.
    static func files(version: Int, count: Int = 200, prefix: String = "") -> [String: [UInt8]] {
        var changedIn = [Int: Int]()
        if version > 1 {
            for release in 2...version {
                for step in [7, 13, 29] { changedIn[(release * step + step / 2) % count] = release }
            }
        }
        var files = [String: [UInt8]]()
        for index in 0..<count {
            let path = "\(prefix)assets/group-\(index / 25)/file-\(index).bin"
            files[path] = content("\(prefix)file \(index) of v\(changedIn[index] ?? 1)", size: 4096 + (index * 37) % 2048)
        }
        files["index.html"] = Array("<!doctype html><title>v\(version)</title>\n".utf8)
        return files
    }

    /// A repository served by nginx, published one version at a time with the library's publisher.
    final class Repo: @unchecked Sendable {
        let scratch: TemporaryFolder
        let repo: String
        let publisher: Publisher
        let nginx: NginxServer
        var reports: [Int: PublishReport] = [:]

        init(locations: String = "", label: String = "files") throws {
            scratch = try TemporaryFolder(label)
            repo = scratch.sub("repo")
            try FileSystem.makeDirectories(repo)
            publisher = Publisher(repository: URL(fileURLWithPath: repo))
            // nginx's workers walk into the folder.
            chmod(scratch.path, 0o755)
            nginx = try NginxServer(documentRoot: repo, locations: locations)
        }

        @discardableResult
        func publish(
            _ version: Int, id: String = "app", route: String = "https://m.example.com/app/", files: [String: [UInt8]]? = nil,
            deltas: Int = 0
        ) throws -> PublishReport {
            let site = scratch.sub("site-\(id)-\(version)")
            try? FileSystem.removeTree(site)
            try writeSite(site, files ?? FileFetchTests.files(version: version))
            var request = PublishRequest(site: site, id: id, version: "\(version).0", routes: [route], deltaCount: deltas)
            request.format = .tarZstd
            let report = try publisher.publish(request)
            reports[version] = report
            return report
        }

        var manifestURL: URL { nginx.url("manifest.json") }
    }

    static func sync(_ root: String, _ url: URL, events: EventLog = EventLog()) async throws -> SyncReport {
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
        let options = Updater.Options(retry: RetryPolicy(attempts: 2, baseDelay: 0.05), events: { events.append($0) })
        return try await Updater(store: store, manifestURL: url, options: options).sync()
    }

    /// The index of a published archive, read from the repository.
    static func index(_ report: PublishReport, repo: String) throws -> FileIndex {
        let reference = try #require(report.archive.files)
        let compressed = try FileSystem.read(repo + "/" + reference.url, limit: Int(reference.size))
        return try FileIndex.decode(
            json: FileIndex.decompress(compressed, source: reference.url), archiveSize: report.archive.size, source: reference.url)
    }

    /// The frames a device holding `held` (sha256s) needs of `index`: one per content it lacks.
    static func neededFrames(_ index: FileIndex, held: Set<String>) -> Int64 {
        var seen = held
        var total: Int64 = 0
        for entry in index.entries where seen.insert(entry.sha256).inserted { total += entry.length }
        return total
    }

    /// What nginx sent, in body bytes, for `path`, in log lines from `from` on.
    static func bytesSent(_ log: [AccessLogEntry], from: Int, path: String) -> (bytes: Int, requests: Int, statuses: Set<Int>) {
        let lines = log.dropFirst(from).filter { $0.uri == "/" + path }
        return (lines.reduce(0) { $0 + $1.bodyBytesSent }, lines.count, Set(lines.map(\.status)))
    }

    @Test func devicesOneFiveAndTwentyVersionsBehindFetchOnlyTheChangedFrames() async throws {
        let repo = try Repo()
        let v1 = try repo.publish(1)
        let roots = try (0..<3).map { _ in try TemporaryFolder("files-device") }
        for root in roots { #expect(try await Self.sync(root.path, repo.manifestURL).changes.first?.via == "archive") }
        let heldV1 = Set(try Self.index(v1, repo: repo.repo).entries.map(\.sha256))
        var version = 1
        for (gap, root) in zip([1, 5, 20], roots) {
            while version < 1 + gap {
                version += 1
                try repo.publish(version)
            }
            let published = try #require(repo.reports[version])
            let before = repo.nginx.accessLog().count
            let events = EventLog()
            let report = try await Self.sync(root.path, repo.manifestURL, events: events)
            let change = try #require(report.changes.first)
            #expect(change.via == "files", "gap \(gap): \(events.all)")
            #expect(change.to == "\(version).0")
            let log = repo.nginx.waitForRequests(before + 3)
            let index = try #require(published.archive.files)
            let frames = Self.neededFrames(try Self.index(published, repo: repo.repo), held: heldV1)
            let ranges = Self.bytesSent(log, from: before, path: published.archive.url)
            let indexSent = Self.bytesSent(log, from: before, path: index.url)
            #expect(ranges.statuses == [206], "gap \(gap)")
            #expect(indexSent.bytes == Int(index.size))
            // Every needed frame, and little else: the part headers, and gaps only between neighbours.
            #expect(Int64(ranges.bytes) >= frames, "gap \(gap)")
            #expect(Double(Int64(ranges.bytes) + index.size) <= 1.1 * Double(frames + index.size), "gap \(gap): \(ranges.bytes) for \(frames)")
            #expect(change.bytes == Int64(ranges.bytes) + index.size)
            #expect(report.bytesFetched == change.bytes)
            #expect(Int64(ranges.bytes) < published.archive.size / 4)
            let layout = CacheLayout(root: root.path)
            let tree = layout.tree(id: "app", version: published.version, treeHash: published.tree)
            #expect(sameFiles(repo.scratch.sub("site-app-\(version)"), tree))
            #expect(FileSystem.contents(of: layout.staging).isEmpty)
        }
    }

    @Test func theCheapestWayWinsADeltaOverFilesForOneVersion() async throws {
        let repo = try Repo()
        try repo.publish(1, deltas: 3)
        let root = try TemporaryFolder("files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        let v2 = try repo.publish(2, deltas: 3)
        let report = try await Self.sync(root.path, repo.manifestURL)
        let delta = try #require(v2.deltas.first { $0.from == "1.0" })
        // The index alone (200 entries, compressed) costs more than a three-file delta.
        #expect(delta.file.size < (v2.archive.files?.size ?? 0) + 3 * 4096)
        #expect(report.changes.first?.via == "delta")
        #expect(report.changes.first?.bytes == delta.file.size)
    }

    @Test func twoPackagesSharingFilesFetchThemOnce() async throws {
        let repo = try Repo()
        let shared = Self.files(version: 1)
        try repo.publish(1, files: shared)
        let root = try TemporaryFolder("files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        // A second package: the same 200 files and 5 of its own.
        var other = shared
        for index in 0..<5 { other["own/extra-\(index).bin"] = content("extra \(index)", size: 5000) }
        let published = try repo.publish(1, id: "vendor", route: "https://m.example.com/vendor/", files: other)
        let before = repo.nginx.accessLog().count
        let report = try await Self.sync(root.path, repo.manifestURL)
        let change = try #require(report.changes.first { $0.id == "vendor" })
        #expect(change.via == "files")
        let held = Set(shared.values.map { SHA256.hash($0).hex })
        let frames = Self.neededFrames(try Self.index(published, repo: repo.repo), held: held)
        let sent = Self.bytesSent(repo.nginx.waitForRequests(before + 3), from: before, path: published.archive.url)
        #expect(Int64(sent.bytes) >= frames && Double(sent.bytes) <= 1.1 * Double(frames) + 1024)
        #expect(frames < 6 * 5100)
    }

    /// Syncs v1, publishes v5 (no delta from v1) and syncs again: the fallback must give the full archive.
    private func fallsBackToTheArchive(_ repo: Repo, tamper: (PublishReport) throws -> Void) async throws {
        try repo.publish(1)
        let root = try TemporaryFolder("files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        for version in 2...5 { try repo.publish(version) }
        let v5 = try #require(repo.reports[5])
        try tamper(v5)
        let events = EventLog()
        let report = try await Self.sync(root.path, repo.manifestURL, events: events)
        #expect(report.outcome == .activated)
        #expect(report.changes.first?.via == "archive")
        #expect(report.changes.first?.to == "5.0")
        let failures = events.all.compactMap { if case .filesFailed(_, _, let error) = $0 { error } else { nil } }
        #expect(failures.count == 1, "\(events.all)")
        let layout = CacheLayout(root: root.path)
        #expect(sameFiles(repo.scratch.sub("site-app-5"), layout.tree(id: "app", version: v5.version, treeHash: v5.tree)))
        #expect(FileSystem.contents(of: layout.staging).isEmpty)
    }

    @Test func aServerIgnoringRangeGivesTheFullArchive() async throws {
        try await fallsBackToTheArchive(try Repo(locations: "location / { max_ranges 0; }")) { _ in }
    }

    @Test func aCorruptedFrameGivesTheFullArchive() async throws {
        // Range requests for archives are answered from a copy with one byte changed in every file's
        // frames; the whole archive, asked without Range, is the true one.
        let repo = try Repo(
            locations: """
                location /archives/ { if ($http_range) { rewrite ^/archives/(.*)$ /corrupt/$1 last; } }
                location /corrupt/ { internal; }
                """)
        try await fallsBackToTheArchive(repo) { v5 in
            var bytes = try FileSystem.read(repo.repo + "/" + v5.archive.url, limit: 1 << 30)
            for entry in try Self.index(v5, repo: repo.repo).entries { bytes[Int(entry.offset + entry.length / 2)] ^= 0x55 }
            let copy = repo.repo + "/corrupt/" + String(v5.archive.url.dropFirst("archives/".count))
            try FileSystem.makeDirectories(FileSystem.parentPath(copy))
            try FileSystem.writeAtomically(bytes, to: copy)
        }
    }

    @Test func aWrongIndexGivesTheFullArchive() async throws {
        let repo = try Repo()
        try await fallsBackToTheArchive(repo) { v5 in
            // The index file the manifest names, with other bytes: its sha256 no longer matches.
            let reference = try #require(v5.archive.files)
            let path = repo.repo + "/" + reference.url
            var bytes = try FileSystem.read(path, limit: 1 << 30)
            bytes[bytes.count / 2] ^= 0x01
            chmod(path, 0o644)
            try FileSystem.writeAtomically(bytes, to: path)
        }
    }

    @Test func theFirstUpdateAfterASeedFetchesOnlyWhatChanged() async throws {
        let repo = try Repo()
        let v1 = try repo.publish(1)
        // The seed: a file: copy of the repository at v1, shipped with the shell and synced first.
        let seed = repo.scratch.sub("seed")
        try shell("cp -a '\(repo.repo)' '\(seed)'")
        let root = try TemporaryFolder("files-device")
        let first = try await Self.sync(root.path, URL(fileURLWithPath: seed + "/manifest.json"))
        #expect(first.changes.first?.via == "archive")
        for version in 2...4 { try repo.publish(version) }
        let v4 = try #require(repo.reports[4])
        let before = repo.nginx.accessLog().count
        let report = try await Self.sync(root.path, repo.manifestURL)
        #expect(report.changes.first?.via == "files")
        let frames = Self.neededFrames(try Self.index(v4, repo: repo.repo), held: Set(try Self.index(v1, repo: repo.repo).entries.map(\.sha256)))
        let sent = Self.bytesSent(repo.nginx.waitForRequests(before + 3), from: before, path: v4.archive.url)
        #expect(Int64(sent.bytes) >= frames && Double(sent.bytes) <= 1.1 * Double(frames) + 1024)
        #expect(repo.nginx.accessLog().dropFirst(before).allSatisfy { $0.status != 200 || !$0.uri.hasSuffix(".tar.zst") })
    }
}
