import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `kill -9` of the real CLI in the middle of a file-level update (docs/protocol.md#switching, #chunked-archives-and-file-indexes): the active
/// set stays the old release whole, nothing the killed sync left is served, and the next sync finishes.
@Suite struct FileFetchKillTests {
    /// The app: 40 small files that never change, four 512 KiB blobs of random bytes that every release
    /// changes (2 MiB of frames: about 15 s under the rate limit, so the kill lands mid-response even on
    /// a loaded machine; the test only waits for the first bytes), and a file that only release 4 has.
    static func appFiles(version: Int) -> [String: [UInt8]] {
        var files = [String: [UInt8]]()
        for index in 0..<40 { files["assets/small-\(index).bin"] = content("app small \(index)", size: 4096) }
        for index in 0..<4 { files["big/blob-\(index).bin"] = content("app blob \(index) of v\(version)", size: 512 << 10) }
        if version == 4 { files["new/added-in-4.bin"] = content("added in 4", size: 8192) }
        files["index.html"] = Array("<!doctype html><title>app v\(version)</title>\n".utf8)
        return files
    }

    /// Waits (at most `timeout` seconds) until `done` holds; returns whether it did.
    static func waitUntil(timeout: Double, _ done: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !done() && Date() < deadline { usleep(5_000) }
        return done()
    }

    /// Bytes of range responses written so far: the frame files under `staging/app-frames-*`.
    static func frameBytes(_ layout: CacheLayout) -> Int64 {
        var total: Int64 = 0
        for name in FileSystem.contents(of: layout.staging) where name.hasPrefix("app-frames-") {
            let folder = layout.stagingDirectory(name)
            for file in FileSystem.contents(of: folder) { total += FileSystem.fileSize(folder + "/" + file) ?? 0 }
        }
        return total
    }

    /// `lookup --json` of `url`: the file's bytes and version, or nil on a miss (exit 1).
    static func lookup(_ url: String, root: String) async throws -> (bytes: [UInt8], version: String)? {
        let result = await InProcessCLI.run(["lookup", url, "--root", root, "--json"])
        if result.status == 1 { return nil }
        try result.checked("lookup \(url)")
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let path = try #require(answer["path"] as? String)
        return (try FileSystem.read(path, limit: 1 << 24), try #require(answer["version"] as? String))
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    /// The device holds release 1 of two packages and syncs release 4 (no delta: by files). The app's
    /// archive is rate-limited while a marker file exists; the lib's is not, so the lib's changed files
    /// are in the content store while the app's range response is still arriving: the kill lands there.
    @Test func killDuringAPartialFetchKeepsTheOldSetAndTheNextSyncFinishes() async throws {
        let repo = try FileFetchTests.Repo(
            locations: "location /archives/app- { if (-f $document_root/slow) { set $limit_rate 131072; } }", label: "files-kill")
        func libFiles(_ version: Int) -> [String: [UInt8]] { FileFetchTests.files(version: version, count: 40, prefix: "lib/") }
        let libRoute = "https://m.example.com/lib/"
        let app1 = try repo.publish(1, files: Self.appFiles(version: 1))
        let lib1 = try repo.publish(1, id: "lib", route: libRoute, files: libFiles(1))
        let root = try TemporaryDirectory(prefix: "files-kill-device")
        let layout = CacheLayout(root: root.path)
        let manifest = repo.manifestURL.absoluteString
        try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("sync of release 1")
        let before = try Self.json(try await InProcessCLI.run(["status", "--root", root.path, "--json"]).checked("status").stdout)
        let generation = try #require((before["active"] as? [String: Any])?["generation"] as? Int)

        var (app4, lib4) = (app1, lib1)
        for version in 2...4 {
            app4 = try repo.publish(version, files: Self.appFiles(version: version))
            lib4 = try repo.publish(version, id: "lib", route: libRoute, files: libFiles(version))
        }
        try FileSystem.writeAtomically(Array("slow".utf8), to: repo.repo + "/slow")
        let store = ContentStore(layout: layout)
        let libChanged = Set(lib4.members.map(\.sha256)).subtracting(lib1.members.map(\.sha256))
        #expect(!libChanged.isEmpty)

        let sync = try ChildProcess(OfflinePkgBinary.path, ["sync", manifest, "--root", root.path, "--json"])
        // The kill lands once the app's range response is streaming into staging and the lib's changed
        // files have been taken into the content store.
        let started = Self.waitUntil(timeout: 20) {
            Self.frameBytes(layout) > 0 && libChanged.allSatisfy { FileSystem.exists(store.path(sha256: $0)) }
        }
        let midway = Self.frameBytes(layout)
        let killed = sync.kill()
        #expect(started, "the range request never started: \(killed.stderr)")
        #expect(killed.status == 128 + SIGKILL, "the sync ended before the kill: \(killed.stdout) \(killed.stderr)")
        #expect(midway > 0 && midway < 2 << 20, "\(midway) bytes of frames when killed")
        // The previous set, whole: lookups answer release 1's bytes, the file only release 4 has is a
        // miss, and status names the same generation.
        let blob = try await #require(try Self.lookup("https://m.example.com/app/big/blob-0.bin", root: root.path))
        #expect(blob.version == "1.0" && blob.bytes == Self.appFiles(version: 1)["big/blob-0.bin"])
        let libPage = try await #require(try Self.lookup(libRoute + "index.html", root: root.path))
        #expect(libPage.version == "1.0" && libPage.bytes == libFiles(1)["index.html"])
        await #expect(try Self.lookup("https://m.example.com/app/new/added-in-4.bin", root: root.path) == nil)
        let after = try Self.json(try await InProcessCLI.run(["status", "--root", root.path, "--json"]).checked("status").stdout)
        let active = try #require(after["active"] as? [String: Any])
        #expect(active["generation"] as? Int == generation)
        let versions = try #require(active["packages"] as? [[String: Any]]).map { "\($0["id"] ?? "") \($0["version"] ?? "")" }
        #expect(versions.sorted() == ["app 1.0", "lib 1.0"])
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the kill")

        // The next sync, at full speed: both packages by files; the lib's content the killed sync
        // fetched is reused (its archive is not asked again), the app's frames are fetched afresh.
        try FileSystem.removeFile(repo.repo + "/slow")
        let logStart = repo.nginx.accessLog().count
        let next = try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--json"]).checked("sync after the kill")
        let report = try Self.json(next.stdout)
        #expect(report["outcome"] as? String == "activated")
        #expect(report["generation"] as? Int == generation + 1)
        let changes = try #require(report["changes"] as? [[String: Any]])
        var via = [String: String]()
        for change in changes { via[change["id"] as? String ?? ""] = change["via"] as? String }
        #expect(via == ["app": "files", "lib": "files"], "\(changes)")
        let log = repo.nginx.waitForRequests(logStart + 3)
        #expect(FileFetchTests.bytesSent(log, from: logStart, path: lib4.archiveURL).requests == 0)
        // The app's frames came again whole, by ranges only: the killed sync's partial frames were not trusted.
        let appRanges = FileFetchTests.bytesSent(log, from: logStart, path: app4.archiveURL)
        #expect(appRanges.statuses == [206])
        #expect(Int64(appRanges.bytes) >= FileFetchTests.neededFrames(app4, held: FileFetchTests.held(app1)))
        let libChange = try #require(changes.first { $0["id"] as? String == "lib" })
        #expect(Int64(libChange["bytes"] as? Int ?? -1) <= FileFetchTests.size(repo, lib4.indexURL))

        // Release 4 served, verify clean, nothing left in staging, and after gc no content without a tree.
        let newBlob = try await #require(try Self.lookup("https://m.example.com/app/big/blob-0.bin", root: root.path))
        #expect(newBlob.version == "4.0" && newBlob.bytes == Self.appFiles(version: 4)["big/blob-0.bin"])
        await #expect(try Self.lookup("https://m.example.com/app/new/added-in-4.bin", root: root.path)?.version == "4.0")
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the next sync")
        #expect(FileSystem.contents(of: layout.staging).isEmpty)
        try await InProcessCLI.run(["gc", "--root", root.path]).checked("gc")
        for shard in FileSystem.contents(of: layout.content) where !shard.hasPrefix(".") {
            for name in FileSystem.contents(of: layout.content + "/" + shard) {
                var info = stat()
                #expect(stat(layout.content + "/\(shard)/\(name)", &info) == 0 && info.st_nlink > 1, "\(shard)/\(name) has no tree")
            }
        }
    }
}
