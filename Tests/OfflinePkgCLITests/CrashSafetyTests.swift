import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// `kill -9` at every stage of a sync: the root must show the previous set whole (or the new one whole,
/// once the switch happened), and the next sync must complete.
@Suite("Crash safety")
struct CrashSafetyTests {
    /// Two packages at `version`. With `noise`, each also holds that many random bytes, so that its
    /// archive is larger than one read of the transfer (512 KiB): a kill mid-download then leaves part of it.
    static func release(_ version: String, noise: Int = 0) throws -> (home: [SiteFile], docs: [SiteFile]) {
        let extra = noise > 0 ? [SiteFile("noise.bin", bytes: try randomBytes(noise))] : []
        return (
            [SiteFile("index.html", "home \(version)"), SiteFile("js/app.js", "app \(version)")] + extra,
            [
                SiteFile("index.html", "docs \(version)"),
                SiteFile("big.bin", bytes: [UInt8](repeating: UInt8(version.count), count: 300_000)),
            ] + extra
        )
    }

    static func randomBytes(_ count: Int) throws -> [UInt8] {
        let source = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? source.close() }
        return [UInt8](try source.read(upToCount: count) ?? Data())
    }

    static func publish(_ repo: TestRepository, _ version: String, noise: Int = 0) throws {
        let files = try release(version, noise: noise)
        try repo.add("home", version, routes: ["https://m.example.com/"], files: files.home)
        try repo.add("docs", version, routes: ["https://m.example.com/docs/"], files: files.docs)
        try repo.publish()
    }

    /// The release a root answers with, checked to be one release for every package: each lookup's file
    /// holds the version the lookup reports, and both packages report the same one.
    static func servedRelease(root: String) async throws -> String {
        var versions = [String: String]()
        for (id, url) in [("home", "https://m.example.com/"), ("docs", "https://m.example.com/docs/")] {
            let result = try await InProcessCLI.run(["lookup", url, "--root", root, "--json"]).checked("lookup \(id)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            let version = try #require(answer["version"] as? String)
            #expect(answer["packageID"] as? String == id)
            #expect(try String(contentsOfFile: try #require(answer["path"] as? String), encoding: .utf8) == "\(id) \(version)")
            versions[id] = version
        }
        #expect(versions["home"] == versions["docs"], "a mix of releases: \(versions)")
        return try #require(versions["home"])
    }

    /// What `status --json` says is active: generation, manifest sequence and each package's version.
    static func activeSet(root: String) async throws -> (generation: Int, sequence: Int, versions: [String: String]) {
        let result = try await InProcessCLI.run(["status", "--root", root, "--json"]).checked("status")
        let status = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let active = try #require(status["active"] as? [String: Any])
        let packages = try #require(active["packages"] as? [[String: Any]])
        var versions = [String: String]()
        for package in packages { versions[try #require(package["id"] as? String)] = package["version"] as? String }
        return (try #require(active["generation"] as? Int), try #require(active["sequence"] as? Int), versions)
    }

    /// Each package's archive (sha256, size) and tree hash, as the repository's manifest lists them.
    static func published(_ repo: TestRepository) throws -> [String: (sha256: String, size: Int64, tree: String)] {
        let manifest = try Manifest(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: repo.manifestPath))), source: "repo")
        var packages = [String: (sha256: String, size: Int64, tree: String)]()
        for package in manifest.packages { packages[package.id] = (package.archive.sha256, package.archive.size, package.tree) }
        return packages
    }

    /// A first install of one package, killed after its tree is unpacked and hashed, while its early
    /// flush may still run (`EarlyFlush`): nothing is active, staging is cleared, and the next sync
    /// installs it whole. The verified download was deleted when the archive had been read, so the next
    /// sync fetches the archive again: the documented cost of flushing beside the lanes (docs/design.md).
    @Test func aFirstInstallKilledAfterItsUnpackIsInstalledByTheNextSync() async throws {
        let repo = try TestRepository()
        try repo.add(
            "home", "1", routes: ["https://m.example.com/"],
            files: [SiteFile("index.html", "home 1"), SiteFile("noise.bin", bytes: try Self.randomBytes(600_000))])
        try repo.publish()
        let root = try TemporaryDirectory(prefix: "offlinepkg-crash")
        let layout = CacheLayout(root: root.path)
        let manifest = "file://" + repo.manifestPath
        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = "after-unpack"
        let killed = try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"], environment: environment)
        #expect(killed.status == 128 + SIGKILL, "expected SIGKILL after the unpack: \(killed.stderr)")
        #expect(try await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", root.path]).status == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: layout.downloads).isEmpty)

        let next = try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--json"]).checked("sync after the kill")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(next.stdout.utf8)) as? [String: Any])
        let archive = try #require(try Self.published(repo)["home"])
        #expect(report["bytesFetched"] as? Int == Int(archive.size))
        let lookup = try await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", root.path]).checked("lookup")
        #expect(try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8) == "home 1")
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the kill")
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path("staging")).isEmpty)
    }

    @Test(arguments: [
        "after-manifest", "mid-download", "content-link", "after-unpack", "before-seal", "before-switch", "after-switch",
    ])
    func killedAtAStageLeavesOneWholeSetAndTheNextSyncCompletes(_ failpoint: String) async throws {
        let repo = try TestRepository()
        try Self.publish(repo, "1")
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory(prefix: "offlinepkg-crash")
        let layout = CacheLayout(root: root.path)
        let manifest = nginx.url("manifest.json").absoluteString
        try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("first sync")
        try Self.publish(repo, "22", noise: failpoint == "mid-download" ? 600_000 : 0)

        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = failpoint
        let killed = try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"], environment: environment)
        #expect(killed.status == 128 + SIGKILL, "expected SIGKILL at \(failpoint): \(killed.stderr)")

        // Lookups answer from one whole release, and status names that very release as active.
        let switched = failpoint == "after-switch"
        let served = try await Self.servedRelease(root: root.path)
        #expect(served == (switched ? "22" : "1"))
        let active = try await Self.activeSet(root: root.path)
        #expect(active.generation == (switched ? 2 : 1) && active.sequence == (switched ? 2 : 1))
        #expect(active.versions == ["home": served, "docs": served])

        // The killed sync's downloads are kept for the next one: whatever is in downloads/ is not fetched
        // again (a complete file is reused, a partial one resumed with Range), so the next sync fetches
        // exactly the rest of the archives whose trees are not installed yet.
        let archives = try Self.published(repo)
        let kept = archives.mapValues { FileSystem.fileSize(layout.partialDownload(sha256: $0.sha256)) ?? 0 }
        if failpoint == "mid-download" {
            // Both archives are larger than the first read of either: whichever came first is partly on disk.
            #expect(
                archives.contains { id, archive in (1..<archive.size).contains(kept[id]!) },
                "the bytes of the download in progress were not kept: \(kept)")
        }
        let missing = archives.filter { id, archive in
            !FileManager.default.fileExists(atPath: layout.tree(id: id, version: "22", treeHash: archive.tree))
        }
        let rest = missing.reduce(Int64(0)) { $0 + $1.value.size - kept[$1.key]! }

        let next = try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--json"]).checked("sync after the crash")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(next.stdout.utf8)) as? [String: Any])
        #expect(report["bytesFetched"] as? Int == Int(rest), "kept after the kill: \(kept), not installed: \(missing.keys)")
        await #expect(try Self.servedRelease(root: root.path) == "22")
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the crash")
        // No staging is left behind, and no download of an archive the active set already has.
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path("staging")).isEmpty)
        // Content the killed sync linked in but no tree took is gone; every active file is held content,
        // once the run after has taken in what a sync of one package leaves pending (the killed sync
        // may have installed one of the two trees, and then the next installs only the other).
        try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("the sync after")
        for sha256 in ContentStoreTests.held(layout) {
            #expect(ContentStoreTests.inode(layout.content(sha256: sha256)).links > 1, "\(sha256) is held by no tree")
        }
        // home and docs of 22 and of 1 (the previous set): two files each; both 22s share one noise.bin.
        #expect(ContentStoreTests.held(layout).count == (failpoint == "mid-download" ? 9 : 8))
        let downloads = try FileManager.default.contentsOfDirectory(atPath: layout.downloads)
        for (id, archive) in archives {
            #expect(!downloads.contains { $0.hasPrefix(archive.sha256) }, "\(id)'s download is left in \(downloads)")
            // Every active tree is read-only at its top, also one the kill left before its seal.
            var info = stat()
            #expect(
                lstat(layout.tree(id: id, version: "22", treeHash: archive.tree), &info) == 0 && info.st_mode & 0o777 == 0o500)
        }
    }

    /// Killed right after a file of the second package was made a link to content the first package
    /// brought in this sync, before anything was written at its name: release 1 stays active and whole,
    /// the next sync installs 2, and no held content is left that no tree links.
    @Test func killedAfterAFileIsLinkedToContentOfTheSameSync() async throws {
        let repo = try TestRepository()
        try Self.publish(repo, "1")
        let root = try TemporaryDirectory(prefix: "offlinepkg-crash")
        let layout = CacheLayout(root: root.path)
        let manifest = "file://" + repo.manifestPath
        try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("first sync")
        // Release 2: both packages carry the same new licence, read whole by the unpacker.
        let licence = SiteFile("LICENSE", bytes: try Self.randomBytes(5_000))
        let files = try Self.release("2")
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: files.home + [licence])
        try repo.add("docs", "2", routes: ["https://m.example.com/docs/"], files: files.docs + [licence])
        try repo.publish()

        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = "held-link"
        let killed = try OfflinePkgBinary.run(
            ["sync", manifest, "--root", root.path, "--jobs", "1", "--quiet"], environment: environment)
        #expect(killed.status == 128 + SIGKILL, "expected SIGKILL at held-link: \(killed.stderr)")
        #expect(try await Self.servedRelease(root: root.path) == "1")
        #expect(try await Self.activeSet(root: root.path).versions == ["home": "1", "docs": "1"])

        try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("sync after the kill")
        #expect(try await Self.servedRelease(root: root.path) == "2")
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the kill")
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path("staging")).isEmpty)
        try await InProcessCLI.run(["gc", "--root", root.path]).checked("gc")
        for sha256 in ContentStoreTests.held(layout) {
            #expect(ContentStoreTests.inode(layout.content(sha256: sha256)).links > 1, "\(sha256) is held by no tree")
        }
    }

    /// Kills land while release 22 is really downloading: its two archives hold 4 MB of random bytes
    /// each, served at 500 kB/s per connection (nginx lets the first second's worth through at once, so
    /// all of it takes about 7 s). Each round starts a sync, waits until it has added bytes to what the
    /// previous rounds left in downloads/, lets it run a random moment more and kills it: four rounds take
    /// at most about 3 MB per archive, so every kill finds the download unfinished.
    @Test func killedAtRandomMomentsOfASlowSync() async throws {
        let repo = try TestRepository()
        try Self.publish(repo, "1")
        let nginx = try NginxServer(documentRoot: repo.path, limitRate: 500_000)
        let root = try TemporaryDirectory(prefix: "offlinepkg-crash")
        let layout = CacheLayout(root: root.path)
        let manifest = nginx.url("manifest.json").absoluteString
        try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("first sync")
        try Self.publish(repo, "22", noise: 4_000_000)
        let archives = try Self.published(repo)
        let total = archives.values.reduce(Int64(0)) { $0 + $1.size }
        #expect(total > 8_000_000)
        // The bytes of release 22's archives that the killed syncs left in downloads/.
        let downloaded = {
            archives.values.reduce(Int64(0)) { $0 + (FileSystem.fileSize(layout.partialDownload(sha256: $1.sha256)) ?? 0) }
        }
        var kept = Int64(0)
        for round in 1...4 {
            let sync = try ChildProcess(OfflinePkgBinary.path, ["sync", manifest, "--root", root.path, "--quiet"])
            let deadline = Date().addingTimeInterval(20)
            while downloaded() <= kept && sync.isRunning && Date() < deadline { usleep(5_000) }
            usleep(UInt32(Double.random(in: 0.05...0.3) * 1_000_000))
            let killed = sync.kill()
            #expect(killed.status == 128 + SIGKILL, "round \(round): the sync was not killed mid-way: \(killed.stderr)")
            // The kill landed during the download: it left more bytes than before, and not all of them.
            let now = downloaded()
            #expect(now > kept && now < total, "round \(round): \(now) of \(total) bytes on disk, \(kept) before")
            kept = now
            // The previous set, whole: every lookup answers from release 1, and status says so.
            let served = try await Self.servedRelease(root: root.path)
            #expect(served == "1" || served == "22")
            #expect(served == "1", "round \(round): the set switched before the download ended")
            let active = try await Self.activeSet(root: root.path)
            #expect(active.generation == 1 && active.sequence == 1 && active.versions == ["home": served, "docs": served])
        }
        // The next sync finishes, fetching only what the kills left out.
        let next = try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--json"])
            .checked("sync after the crashes")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(next.stdout.utf8)) as? [String: Any])
        #expect(report["bytesFetched"] as? Int == Int(total - kept))
        await #expect(try Self.servedRelease(root: root.path) == "22")
        let active = try await Self.activeSet(root: root.path)
        #expect(active.generation == 2 && active.versions == ["home": "22", "docs": "22"])
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the crashes")
    }
}
