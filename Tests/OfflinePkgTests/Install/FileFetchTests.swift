import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// File-level updates (docs/protocol.md#chunked-archives-and-file-indexes) against nginx: only the frames of the files a device lacks cross the
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

    /// A repository of chunked archives (made with the stock zstd, `ChunkedArchiveBuilder`) served by
    /// nginx, published one version at a time.
    final class Repo: @unchecked Sendable {
        let scratch: TemporaryDirectory
        let repo: String
        let nginx: NginxServer
        var reports: [Int: ChunkedArchiveBuilder.Built] = [:]
        private var entries: [String: [String: Any]] = [:]
        private var sequence = 0

        init(locations: String = "", label: String = "files") throws {
            scratch = try TemporaryDirectory(prefix: label)
            repo = scratch.path("repo")
            try FileSystem.makeDirectories(repo)
            // nginx's workers walk into the folder.
            chmod(scratch.path, 0o755)
            nginx = try NginxServer(documentRoot: repo, locations: locations)
        }

        @discardableResult
        func publish(
            _ version: Int, id: String = "app", route: String = "https://m.example.com/app/", files: [String: [UInt8]]? = nil
        ) throws -> ChunkedArchiveBuilder.Built {
            let built = try ChunkedArchiveBuilder.build(
                id: id, version: "\(version).0", routes: [route], files: files ?? FileFetchTests.files(version: version),
                site: site(id, version), repo: repo)
            reports[version] = built
            entries[id] = built.entry
            sequence += 1
            let path = repo + "/manifest.json"
            try writeManifest(packages: entries.keys.sorted().map { entries[$0]! }, sequence: sequence, to: path)
            // nginx's validators have one-second resolution: each publish its own mtime.
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(Double(sequence))], ofItemAtPath: path)
            return built
        }

        func site(_ id: String, _ version: Int) -> String { scratch.path("site-\(id)-\(version)") }
        var manifestURL: URL { nginx.url("manifest.json") }
    }

    static func sync(_ root: String, _ url: URL, events: EventLog = EventLog()) async throws -> SyncReport {
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
        let options = Updater.Options(retry: RetryPolicy(attempts: 2, baseDelay: 0.05), events: { events.append($0) })
        return try await Updater(store: store, manifestURL: url, options: options).sync()
    }

    /// The frames a device holding `held` (sha256s) needs of `built`: one per content it lacks.
    static func neededFrames(_ built: ChunkedArchiveBuilder.Built, held: Set<String>) -> Int64 {
        var seen = held
        var total: Int64 = 0
        for member in built.members where seen.insert(member.sha256).inserted { total += Int64(member.length) }
        return total
    }

    static func size(_ repo: Repo, _ url: String) -> Int64 { FileSystem.fileSize(repo.repo + "/" + url) ?? -1 }

    /// What nginx sent, in body bytes, for `path`'s GETs, in log lines from `from` on (a device asks an
    /// origin it does not know yet how it takes ranges with a HEAD, which sends no body).
    static func bytesSent(_ log: [AccessLogEntry], from: Int, path: String) -> (bytes: Int, requests: Int, statuses: Set<Int>) {
        let lines = log.dropFirst(from).filter { $0.uri == "/" + path && $0.method == "GET" }
        return (lines.reduce(0) { $0 + $1.bodyBytesSent }, lines.count, Set(lines.map(\.status)))
    }

    static func tree(_ built: ChunkedArchiveBuilder.Built) -> String { built.entry["tree"] as! String }
    static func held(_ built: ChunkedArchiveBuilder.Built) -> Set<String> { Set(built.members.map(\.sha256)) }

    /// Checks one file-level sync against nginx's log from line `before`: the index once, the archive
    /// only by 206s, the ranges' bytes at least the needed frames and within 1.1 times of them with the
    /// index; returns the bytes the archive's ranges took.
    @discardableResult
    static func expectOnlyNeededFrames(
        _ repo: Repo, _ built: ChunkedArchiveBuilder.Built, held: Set<String>, before: Int, report: SyncReport, id: String = "app",
        _ what: String
    ) throws -> Int64 {
        let change = try #require(report.changes.first { $0.id == id })
        #expect(change.via == .files, "\(what)")
        let log = repo.nginx.waitForRequests(before + 3)
        let frames = neededFrames(built, held: held)
        let ranges = bytesSent(log, from: before, path: built.archiveURL)
        let index = bytesSent(log, from: before, path: built.indexURL)
        let indexSize = size(repo, built.indexURL)
        #expect(ranges.statuses == [206], "\(what)")
        #expect(index.requests == 1 && Int64(index.bytes) == indexSize, "\(what)")
        #expect(Int64(ranges.bytes) >= frames, "\(what)")
        #expect(
            Double(Int64(ranges.bytes) + indexSize) <= 1.1 * Double(frames + indexSize),
            "\(what): \(ranges.bytes) B of ranges for \(frames) B of frames, index \(indexSize) B")
        #expect(change.bytes == Int64(ranges.bytes) + indexSize, "\(what)")
        // The way was chosen because it is cheaper than the archive (20 releases of 3 files change up
        // to 60 of the 200 files: a good part of the archive, but still only the changed frames).
        #expect(Int64(ranges.bytes) + indexSize < size(repo, built.archiveURL), "\(what)")
        return Int64(ranges.bytes)
    }

    @Test func devicesOneFiveAndTwentyVersionsBehindFetchOnlyTheChangedFrames() async throws {
        let repo = try Repo()
        let v1 = try repo.publish(1)
        let roots = try (0..<3).map { _ in try TemporaryDirectory(prefix: "files-device") }
        for root in roots { #expect(try await Self.sync(root.path, repo.manifestURL).changes.first?.via == .archive) }
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
            #expect(report.changes.first?.to == "\(version).0")
            try Self.expectOnlyNeededFrames(repo, published, held: Self.held(v1), before: before, report: report, "gap \(gap): \(events.all)")
            #expect(report.bytesFetched == report.changes.first?.bytes)
            let layout = CacheLayout(root: root.path)
            let tree = layout.tree(id: "app", version: "\(version).0", treeHash: Self.tree(published))
            #expect(sameFiles(repo.site("app", version), tree))
            #expect(FileSystem.contents(of: layout.staging).isEmpty)
        }
    }

    /// A tiny package: the archive is about as small as its index. An index no smaller than the archive
    /// is never fetched; a smaller one is, and then index plus ranges lose to the archive: its bytes count.
    @Test func aPackageWhoseArchiveIsCheapestGoesByTheArchive() async throws {
        let repo = try Repo()
        try repo.publish(1, files: ["index.html": Array("v1".utf8), "a.txt": Array("a".utf8)])
        let root = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        let v2 = try repo.publish(2, files: ["index.html": Array("v2".utf8), "a.txt": Array("a".utf8)])
        let before = repo.nginx.accessLog().count
        let report = try await Self.sync(root.path, repo.manifestURL)
        let (index, archive) = (Self.size(repo, v2.indexURL), Self.size(repo, v2.archiveURL))
        #expect(report.changes.first?.via == .archive)
        let indexRequests = Self.bytesSent(repo.nginx.waitForRequests(before + 2), from: before, path: v2.indexURL).requests
        #expect(indexRequests == (index >= archive ? 0 : 1))
        #expect(report.changes.first?.bytes == archive + (index >= archive ? 0 : index))
        #expect(Self.bytesSent(repo.nginx.accessLog(), from: before, path: v2.archiveURL).statuses == [200])
    }

    /// The publisher's own chunked archives (`publish`'s default): a device five versions behind (no
    /// delta from its version) goes by files; one version behind, the three-file delta is cheaper.
    @Test func publishersArchivesGoByFilesOrByTheCheaperDelta() async throws {
        let published = try PublisherRepo(prefix: "files-publish")
        let (scratch, nginx) = (published.scratch, published.nginx)
        func publish(_ version: Int) throws -> PublishReport { try published.publish(version, files: Self.files(version: version)) }
        _ = try publish(1)
        let behind = try TemporaryDirectory(prefix: "files-device")
        let near = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(behind.path, nginx.url("manifest.json"))
        for version in 2...5 { _ = try publish(version) }
        _ = try await Self.sync(near.path, nginx.url("manifest.json"))
        // nginx's ETag is the manifest's mtime (in seconds) and size, and manifests 5 and 6 have one size:
        // published within the second `near` fetched 5, 6 would be answered 304.
        try await Task.sleep(for: .seconds(1.1))
        let v6 = try publish(6)
        #expect(v6.fileIndex != nil)
        let far = try await Self.sync(behind.path, nginx.url("manifest.json"))
        #expect(far.changes.first?.via == .files)
        #expect(try #require(far.changes.first?.bytes) < v6.archive.size / 4)
        let before = nginx.accessLog().count
        let close = try await Self.sync(near.path, nginx.url("manifest.json"))
        let delta = try #require(v6.deltas.first { $0.from == "5.0" })
        #expect(close.changes.first?.via == .delta)
        // An index or an index delta may have been fetched to find the delta cheaper: its bytes count too.
        let spent = try #require(close.changes.first?.bytes)
        let log = nginx.waitForRequests(before + 2)
        #expect(spent >= delta.file.size && spent == Self.packageBytesSent(log, from: before), "\(log.dropFirst(before))")
        for root in [behind, near] {
            let tree = CacheLayout(root: root.path).tree(id: "app", version: "6.0", treeHash: v6.tree)
            #expect(sameFiles(scratch.path("site-6"), tree))
        }
    }

    @Test func twoPackagesSharingFilesFetchThemOnce() async throws {
        let repo = try Repo()
        let shared = Self.files(version: 1)
        let app = try repo.publish(1, files: shared)
        let root = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        // A second package: the same 200 files and 5 of its own.
        var other = shared
        for index in 0..<5 { other["own/extra-\(index).bin"] = content("extra \(index)", size: 5000) }
        let vendor = try repo.publish(1, id: "vendor", route: "https://m.example.com/vendor/", files: other)
        let before = repo.nginx.accessLog().count
        let report = try await Self.sync(root.path, repo.manifestURL)
        let bytes = try Self.expectOnlyNeededFrames(repo, vendor, held: Self.held(app), before: before, report: report, id: "vendor", "vendor")
        #expect(bytes < 6 * 5200)
        // The shared files are one inode for both packages.
        let layout = CacheLayout(root: root.path)
        let a = layout.tree(id: "app", version: "1.0", treeHash: Self.tree(app)) + "/assets/group-0/file-0.bin"
        let b = layout.tree(id: "vendor", version: "1.0", treeHash: Self.tree(vendor)) + "/assets/group-0/file-0.bin"
        #expect(inode(a) != nil && inode(a) == inode(b))
    }

    /// Syncs v1, publishes up to v5 and syncs again after `tamper`: the fallback must give the full
    /// archive, and the sync still activates.
    private func fallsBackToTheArchive(_ repo: Repo, tamper: (ChunkedArchiveBuilder.Built) throws -> Void) async throws {
        try repo.publish(1)
        let root = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        for version in 2...5 { try repo.publish(version) }
        let v5 = try #require(repo.reports[5])
        try tamper(v5)
        let events = EventLog()
        let report = try await Self.sync(root.path, repo.manifestURL, events: events)
        #expect(report.outcome == .activated)
        #expect(report.changes.first?.via == .archive)
        #expect(report.changes.first?.to == "5.0")
        let failures = events.all.compactMap { if case .filesFailed(_, _, let error) = $0 { error } else { nil } }
        #expect(failures.count == 1, "\(events.all)")
        let layout = CacheLayout(root: root.path)
        #expect(sameFiles(repo.site("app", 5), layout.tree(id: "app", version: "5.0", treeHash: Self.tree(v5))))
        #expect(FileSystem.contents(of: layout.staging).isEmpty)
    }

    @Test func aServerIgnoringRangeGivesTheFullArchive() async throws {
        try await fallsBackToTheArchive(try Repo(locations: "location / { max_ranges 0; }")) { _ in }
    }

    /// Range requests for archives are answered from `/corrupt/`; the whole archive, asked without
    /// Range, is the true one.
    static let rangesFromCorrupt = """
        location /archives/ { if ($http_range) { rewrite ^/archives/(.*)$ /corrupt/$1 last; } }
        location /corrupt/ { internal; }
        """

    /// Serves `bytes` to range requests for `built`'s archive.
    static func serveToRanges(_ bytes: [UInt8], _ repo: Repo, _ built: ChunkedArchiveBuilder.Built) throws {
        let copy = repo.repo + "/corrupt/" + String(built.archiveURL.dropFirst("archives/".count))
        try FileSystem.makeDirectories(FileSystem.parentPath(copy))
        try FileSystem.writeAtomically(bytes, to: copy)
    }

    @Test func aCorruptedFrameGivesTheFullArchive() async throws {
        // One byte changed in every member's frames.
        let repo = try Repo(locations: Self.rangesFromCorrupt)
        try await fallsBackToTheArchive(repo) { v5 in
            var bytes = try FileSystem.read(repo.repo + "/" + v5.archiveURL, limit: 1 << 30)
            for member in v5.members { bytes[member.offset + member.length / 2] ^= 0x55 }
            try Self.serveToRanges(bytes, repo, v5)
        }
    }

    @Test func aFrameOfOtherContentOfTheSameSizeGivesTheFullArchive() async throws {
        // Members' frames replaced, where the lengths allow, by frames that decompress cleanly to a file
        // of the index's path and size whose bytes are others: only the member's sha256 tells them apart
        // (the tree hash is computed from the index's sha256s).
        let repo = try Repo(locations: Self.rangesFromCorrupt)
        try await fallsBackToTheArchive(repo) { v5 in
            var files = Self.files(version: 5)
            for (path, bytes) in files where path.hasSuffix(".bin") { files[path] = content("other \(path)", size: bytes.count) }
            let other = try ChunkedArchiveBuilder.build(
                id: "app", version: "5.0", routes: ["https://m.example.com/app/"], files: files,
                site: repo.scratch.path("other-site"), repo: repo.scratch.path("other-repo"))
            let otherBytes = try FileSystem.read(repo.scratch.path("other-repo/" + other.archiveURL), limit: 1 << 30)
            var bytes = try FileSystem.read(repo.repo + "/" + v5.archiveURL, limit: 1 << 30)
            let v1 = try #require(repo.reports[1])
            var swappedFetched = 0
            for member in v5.members {
                let twin = try #require(other.members.first { $0.path == member.path })
                guard twin.length == member.length, twin.sha256 != member.sha256 else { continue }
                let frame = otherBytes[twin.offset..<twin.offset + twin.length]
                bytes.replaceSubrange(member.offset..<member.offset + member.length, with: frame)
                if !Self.held(v1).contains(member.sha256) { swappedFetched += 1 }
            }
            // Some of the files the device lacks (and so fetches) come with other bytes.
            try #require(swappedFetched > 0)
            try Self.serveToRanges(bytes, repo, v5)
        }
    }

    /// A fetched member's frames that decompress to far more than the file index's size (a zstd bomb of
    /// zeros at the right path, padded to the member's length with a skippable frame): the unpack stops
    /// once it passes the index's size, instead of writing all of it to staging before the size check,
    /// and the sync falls back to the archive.
    @Test func framesInflatingPastTheIndexSizeStopAtIt() async throws {
        let repo = try Repo(locations: Self.rangesFromCorrupt)
        let v1 = try repo.publish(1)
        let root = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        let v2 = try repo.publish(2)
        let target = try #require(v2.members.first { !Self.held(v1).contains($0.sha256) })
        let scratch = try TemporaryDirectory(prefix: "files-bomb")
        try Data(ChunkedArchiveBuilder.member(path: target.path, bytes: [UInt8](repeating: 0, count: 64 << 20)))
            .write(to: URL(fileURLWithPath: scratch.path("bomb")))
        let zstd = try OfflinePkgTestSupport.run("/usr/bin/zstd", ["-q", "-19", "-f", scratch.path("bomb")])
        #expect(zstd.status == 0)
        var frame = try FileSystem.read(scratch.path("bomb.zst"), limit: 1 << 20)
        let padding = target.length - frame.count - 8
        try #require(padding >= 0, "the bomb's frame (\(frame.count) B) does not fit the member's \(target.length) B")
        frame += [0x50, 0x2A, 0x4D, 0x18] + withUnsafeBytes(of: UInt32(padding).littleEndian, Array.init)
        frame += [UInt8](repeating: 0, count: padding)
        var bytes = try FileSystem.read(repo.repo + "/" + v2.archiveURL, limit: 1 << 30)
        bytes.replaceSubrange(target.offset..<(target.offset + target.length), with: frame)
        try Self.serveToRanges(bytes, repo, v2)

        let events = EventLog()
        let report = try await Self.sync(root.path, repo.manifestURL, events: events)
        #expect(report.outcome == .activated)
        #expect(report.changes.first?.via == .archive)
        let failures = events.all.compactMap { if case .filesFailed(_, _, let error) = $0 { error } else { nil } }
        #expect(failures.count == 1, "\(events.all)")
        #expect(failures.first.map { "\($0)".contains("unpacks to more than \(target.size) bytes") } == true, "\(failures)")
        #expect(FileSystem.contents(of: CacheLayout(root: root.path).staging).isEmpty)
    }

    @Test func aWrongIndexGivesTheFullArchive() async throws {
        let repo = try Repo()
        try await fallsBackToTheArchive(repo) { v5 in
            // The index file the manifest names, with other bytes: its sha256 no longer matches.
            let path = repo.repo + "/" + v5.indexURL
            var bytes = try FileSystem.read(path, limit: 1 << 30)
            bytes[bytes.count / 2] ^= 0x01
            try FileSystem.writeAtomically(bytes, to: path)
        }
    }

    /// `sync --dry-run` names the way and its bytes before anything is written; `status` keeps them after.
    @Test func theDryRunAndStatusShowTheWayAndItsBytes() async throws {
        let repo = try Repo()
        try repo.publish(1)
        let root = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(root.path, repo.manifestURL)
        for version in 2...5 { try repo.publish(version) }
        let store = try PackageStore(root: URL(fileURLWithPath: root.path), options: .init(watchInterval: 0))
        let plan = try await Updater(store: store, manifestURL: repo.manifestURL).plan()
        let step = try #require(plan.steps.first)
        #expect(step.via == .files)
        #expect(step.bytes > Self.size(repo, repo.reports[5]!.indexURL) && step.bytes < Self.size(repo, repo.reports[5]!.archiveURL) / 4)
        // Nothing written: the index was read into memory.
        #expect(FileSystem.contents(of: CacheLayout(root: root.path).downloads).isEmpty)
        let report = try await Self.sync(root.path, repo.manifestURL)
        let change = try #require(report.changes.first)
        #expect(change.via == .files)
        // The estimate is the plan's: what the requests ask for plus part headers, close to what came.
        #expect(abs(Double(step.bytes - (change.bytes ?? 0))) <= 0.05 * Double(step.bytes))
        #expect(try store.status().lastSync == report.changes)
    }

    @Test func theFirstUpdateAfterASeedFetchesOnlyWhatChanged() async throws {
        let repo = try Repo()
        let v1 = try repo.publish(1)
        // The seed: a file: copy of the repository at v1, shipped with the shell and synced first.
        let seed = repo.scratch.path("seed")
        try shell("cp -a '\(repo.repo)' '\(seed)'")
        let root = try TemporaryDirectory(prefix: "files-device")
        let first = try await Self.sync(root.path, URL(fileURLWithPath: seed + "/manifest.json"))
        #expect(first.changes.first?.via == .archive)
        for version in 2...4 { try repo.publish(version) }
        let v4 = try #require(repo.reports[4])
        let before = repo.nginx.accessLog().count
        let report = try await Self.sync(root.path, repo.manifestURL)
        try Self.expectOnlyNeededFrames(repo, v4, held: Self.held(v1), before: before, report: report, "after the seed")
    }
}
