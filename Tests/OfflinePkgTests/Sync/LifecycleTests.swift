import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// Field lifecycle: cheap checks, resume, rollback, launch confirmation, gating, GC, verify.
@Suite("Field lifecycle")
struct LifecycleTests {
    static func repo(_ versions: [String: String] = ["home": "1"], big: Int = 0) throws -> TestRepository {
        let repo = try TestRepository()
        for (id, version) in versions.sorted(by: { $0.key < $1.key }) {
            var files = [SiteFile("index.html", "\(id) \(version)")]
            // Random bytes: incompressible, so the archive is as big as the file.
            if big > 0 { files.append(SiteFile("big.bin", bytes: (0..<big).map { _ in UInt8.random(in: 0...255) })) }
            try repo.add(
                id, version, routes: [id == "home" ? "https://m.example.com/" : "https://m.example.com/\(id)/"], files: files)
        }
        try repo.publish()
        return repo
    }

    static func store(_ root: TemporaryDirectory) throws -> PackageStore {
        try PackageStore(root: root.url, options: .init(watchInterval: 0))
    }

    /// The writer of `root`, as a shell that confirms launches opens it.
    static func writer(_ root: TemporaryDirectory, launches: Int) throws -> CacheRoot {
        CacheRoot(store: try store(root), launchesBeforeRevert: launches)
    }

    /// A root that synced `home 1`, then `home 2`: generation 2 active, 1 before it. The repository is
    /// returned to keep it alive.
    static func syncedTwoReleases() async throws -> (TestRepository, TemporaryDirectory) {
        let repo = try Self.repo()
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Self.sync(try Self.store(root), url)
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        _ = try await Self.sync(try Self.store(root), url)
        return (repo, root)
    }

    static func sync(_ store: PackageStore, _ url: URL, _ options: Updater.Options = .init()) async throws -> SyncReport {
        try await Updater(store: store, manifestURL: url, options: options).sync()
    }

    static func served(_ store: PackageStore, _ url: String = "https://m.example.com/") throws -> String? {
        try store.resolve(url).map { try String(contentsOfFile: $0.path, encoding: .utf8) }
    }

    @Test func aNotModifiedSyncMakesExactlyOneRequest() async throws {
        let repo = try Self.repo()
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory()
        let store = try Self.store(root)
        _ = try await Self.sync(store, nginx.url("manifest.json"))
        let before = nginx.waitForRequests(2).count
        let report = try await Self.sync(store, nginx.url("manifest.json"))
        #expect(report.outcome == .notModified && report.requests == 1)
        let log = nginx.waitForRequests(before + 1)
        #expect(log.count == before + 1)
        #expect(log.last?.status == 304)
    }

    @Test func minIntervalSkipsTheNetwork() async throws {
        let repo = try Self.repo()
        let nginx = try NginxServer(documentRoot: repo.path)
        let store = try Self.store(try TemporaryDirectory())
        _ = try await Self.sync(store, nginx.url("manifest.json"), .init(minInterval: 3600))
        let count = nginx.waitForRequests(2).count
        let report = try await Self.sync(store, nginx.url("manifest.json"), .init(minInterval: 3600))
        #expect(report.outcome == .skipped)
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(nginx.accessLog().count == count)
    }

    @Test func aChangedShellVersionReevaluatesTheStoredManifestAfterA304() async throws {
        let repo = try TestRepository()
        try repo.add(
            "home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")],
            extra: ["minShellVersion": "3.0"])
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let store = try Self.store(try TemporaryDirectory())
        let held = try await Self.sync(store, nginx.url("manifest.json"), .init(shellVersion: "2.9"))
        #expect(held.heldBack.map(\.id) == ["home"] && held.heldBack[0].reason.contains("needs shell 3.0"))
        #expect(try store.status().heldBack.map(\.id) == ["home"])
        let upgraded = try await Self.sync(store, nginx.url("manifest.json"), .init(shellVersion: "3.1"))
        #expect(upgraded.outcome == .activated)
        #expect(nginx.waitForRequests(3).last?.status == 200)  // the archive; the manifest was a 304
        #expect(nginx.accessLog().filter { $0.uri == "/manifest.json" }.last?.status == 304)
        #expect(try Self.served(store) == "home 2")
    }

    // sha256("6f1c2a4e-0000-4000-8000-000000000001:home:2") starts 9fdac17b (coreutils sha256sum):
    // 2681913723 mod 100 = 23. A device takes the version when bucket < rollout (docs/protocol.md#who-takes-a-release), so 23 % is
    // the last that holds it back and 24 % the first that installs it.
    @Test(arguments: [0, 23, 24, 25, 50, 100])
    func rolloutFollowsTheBucketOfTheDeviceID(_ percent: Int) async throws {
        let repo = try TestRepository()
        try repo.add(
            "home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")],
            extra: ["rollout": percent])
        try repo.publish()
        let root = try TemporaryDirectory()
        _ = try root.write("6f1c2a4e-0000-4000-8000-000000000001\n", to: "device-id")
        let store = try Self.store(root)
        let report = try await Self.sync(store, URL(fileURLWithPath: repo.manifestPath))
        #expect(Rollout.bucket(deviceID: "6f1c2a4e-0000-4000-8000-000000000001", packageID: "home", version: "2") == 23)
        let installed = 23 < percent
        #expect((report.outcome == .activated) == installed)
        #expect(try Self.served(store) == (installed ? "home 2" : nil))
        #expect(report.heldBack.map(\.reason) == (installed ? [] : ["rollout \(percent)%: this device's bucket is 23"]))
    }

    @Test func anInterruptedDownloadResumesWithRangeAndFetchesOnlyTheRest() async throws {
        let repo = try Self.repo(big: 2_000_000)
        let server = try FaultServer(documentRoot: repo.path)
        let archive = "/" + repo.archiveURL("home")
        server.script(archive, [.resetAfter(bytes: 600_000)])
        let store = try Self.store(try TemporaryDirectory())
        // One attempt: the sync fails, keeping the partial download.
        await #expect(throws: OfflinePkgError.self) {
            try await Self.sync(store, server.url("manifest.json"), .init(retry: .init(attempts: 1)))
        }
        let report = try await Self.sync(store, server.url("manifest.json"))
        #expect(report.outcome == .activated)
        let requests = server.requests(for: archive)
        #expect(requests.count == 2)
        let size = try fileSize(repo.archivePath("home"))
        let received = requests[0].bodyBytesSent
        #expect(requests[1].headers["range"] == "bytes=\(received)-")
        #expect(requests[1].headers["if-range"] != nil)
        #expect(requests[1].status == 206 && requests[1].bodyBytesSent == size - received)
        #expect(report.bytesFetched == Int64(size - received))
    }

    @Test func aFileChangedOnTheServerRestartsTheResumedDownload() async throws {
        let repo = try Self.repo(big: 1_000_000)
        let server = try FaultServer(documentRoot: repo.path)
        server.script("/" + repo.archiveURL("home"), [.resetAfter(bytes: 300_000)])
        let store = try Self.store(try TemporaryDirectory())
        await #expect(throws: OfflinePkgError.self) {
            try await Self.sync(store, server.url("manifest.json"), .init(retry: .init(attempts: 1)))
        }
        // The publisher rebuilds the same archive name with other bytes: If-Range no longer matches.
        try repo.add(
            "home", "1", routes: ["https://m.example.com/"],
            files: [
                SiteFile("index.html", "home 1 rebuilt"),
                SiteFile("big.bin", bytes: (0..<1_000_000).map { _ in UInt8.random(in: 0...255) }),
            ])
        try repo.publish()
        let report = try await Self.sync(store, server.url("manifest.json"))
        #expect(report.outcome == .activated)
        let last = try #require(server.requests(for: "/" + repo.archiveURL("home")).last)
        #expect(last.status == 200)
        #expect(try Self.served(store) == "home 1 rebuilt")
    }

    @Test func rollbackReturnsToThePreviousSetAndHoldsTheReleaseBack() async throws {
        let repo = try Self.repo()
        let store = try Self.store(try TemporaryDirectory())
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Self.sync(store, url)
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        _ = try await Self.sync(store, url)
        #expect(try Self.served(store) == "home 2")
        let restored = try store.writer.rollback()
        #expect(restored.generation == 3 && restored.packages.map(\.version) == ["1"])
        #expect(try Self.served(store) == "home 1")
        // The rolled-back release is not installed again...
        let again = try await Self.sync(store, url)
        #expect(try Self.served(store) == "home 1")
        #expect(again.outcome != .activated)
        // ...until the manifest offers another version.
        try repo.add("home", "3", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 3")])
        try repo.publish()
        _ = try await Self.sync(store, url)
        #expect(try Self.served(store) == "home 3")
        let history = try store.status().history.map(\.generation)
        #expect(history == [1, 2, 3, 4])
    }

    @Test func anUnconfirmedSetIsRevertedAfterNLaunches() async throws {
        let (repo, root) = try await Self.syncedTwoReleases()
        // Launch 1 and 2 of generation 2, never confirmed; a confirmation of another generation does nothing.
        #expect(try Self.writer(root, launches: 2).recordLaunch() == .awaitingConfirmation(generation: 2, launch: 1))
        try Self.writer(root, launches: 2).confirmLaunch(generation: 1)
        #expect(try Self.writer(root, launches: 2).recordLaunch() == .awaitingConfirmation(generation: 2, launch: 2))
        let third = try Self.store(root)
        #expect(try CacheRoot(store: third, launchesBeforeRevert: 2).recordLaunch() == .reverted(from: 2, to: 3))
        #expect(try Self.served(third) == "home 1")
        #expect(try third.status().reverted == ["home": "2"])
        _ = try await Self.sync(third, URL(fileURLWithPath: repo.manifestPath))
        #expect(try Self.served(third) == "home 1")
    }

    @Test func aConfirmedSetStays() async throws {
        let (_, root) = try await Self.syncedTwoReleases()
        let store = try Self.store(root)
        let writer = CacheRoot(store: store, launchesBeforeRevert: 1)
        #expect(try writer.recordLaunch() == .awaitingConfirmation(generation: 2, launch: 1))
        try writer.confirmLaunch(generation: 2)
        for _ in 0..<3 { #expect(try Self.writer(root, launches: 1).recordLaunch() == .confirmed) }
        #expect(try Self.served(store) == "home 2")
    }

    @Test func aLeaseKeepsATreeThroughGCUntilTheReaderExits() async throws {
        let repo = try Self.repo()
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        let syncer = try Self.store(root)
        _ = try await Self.sync(syncer, url)
        // A reader in another process holds generation 1 (it never reloads).
        let reader = try ChildProcess(OfflinePkgBinary.path, ["serve", "--root", root.path, "--port", "0"])
        defer { reader.kill() }
        #expect(reader.firstLine() != nil)  // the listening URL: the lease is taken
        reader.signal(SIGSTOP)  // frozen: it cannot move its lease to a newer set
        for version in ["2", "3"] {
            try repo.add("home", version, routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home \(version)")])
            try repo.publish()
            _ = try await Self.sync(syncer, url)
        }
        let trees = {
            try FileManager.default.contentsOfDirectory(atPath: root.path("trees/home")).filter { !$0.hasSuffix(".index") && !$0.hasSuffix(".lookup") }
                .sorted()
        }
        #expect(try trees().count == 3)  // 1 (leased), 2 (previous), 3 (active)
        reader.kill()
        let removed = try syncer.writer.collectGarbage()
        #expect(removed.count == 1 && removed[0].contains("/trees/home/1-"))
        #expect(try trees().count == 2)
    }

    @Test func verifyFindsAChangedByteAndRepairMendsIt() async throws {
        let repo = try Self.repo(["home": "1", "docs": "1"])
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory()
        let store = try Self.store(root)
        _ = try await Self.sync(store, nginx.url("manifest.json"))
        let file = try #require(store.resolve("https://m.example.com/docs/")).path
        chmod(file, 0o644)
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        bytes[0] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let damage = try store.writer.verify()
        // The tree's file is a link to its held content: the write changed that inode, so the content
        // file is named too, with the tree path that links it.
        #expect(damage.map(\.packageID) == ["docs", TreeDamage.contentStore] && damage[0].path == "index.html")
        #expect(damage.last?.problem.hasSuffix("linked by " + FileSystem.parentPath(file) + "/index.html") == true, "\(damage)")
        let cli = await InProcessCLI.run(["verify", "--root", root.path])
        #expect(cli.status == 4 && cli.stderr.contains("damaged: docs 1: index.html"))
        let repaired = try await TreeRepairer(root: store.writer).repair(damage)
        #expect(repaired == [TreeDamage.contentStore, "docs"])
        #expect(try store.writer.verify().isEmpty)
        #expect(nginx.requestCount(path: "/" + repo.archiveURL("docs")) == 2)
    }

    /// After a rollback the manifest no longer offers the active version: repair fetches the archive the
    /// active set recorded for it, checked against the same hash and tree.
    @Test func repairAfterARollbackFetchesTheRecordedArchive() async throws {
        let repo = try Self.repo(["home": "1"])
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory()
        let store = try Self.store(root)
        _ = try await Self.sync(store, nginx.url("manifest.json"))
        let firstArchive = "/" + repo.archiveURL("home")
        for version in ["2", "3"] {
            try repo.add("home", version, routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home \(version)")])
            try repo.publish()
            _ = try await Self.sync(store, nginx.url("manifest.json"))
        }
        try store.writer.rollback()
        #expect(try Self.served(store) == "home 2")

        let file = try #require(store.resolve("https://m.example.com/")).path
        chmod(file, 0o644)
        try Data("home 2, damaged".utf8).write(to: URL(fileURLWithPath: file))
        let damage = try store.writer.verify()
        #expect(damage.map(\.packageID) == ["home", TreeDamage.contentStore])
        #expect(try await TreeRepairer(root: store.writer).repair(damage) == [TreeDamage.contentStore, "home"])
        #expect(try store.writer.verify().isEmpty)
        #expect(try Self.served(try Self.store(root)) == "home 2")
        #expect(nginx.requestCount(path: firstArchive) == 1)
        #expect(nginx.accessLog().filter { $0.uri.hasSuffix("home-2.tar.gz") }.count == 2)
    }

    @Test func notEnoughFreeSpaceFailsBeforeDownloading() async throws {
        let repo = try Self.repo()
        repo.edit("home") { entry in
            var archive = entry["archive"] as! [String: Any]
            archive["size"] = Int64(1) << 50  // a petabyte: no disk here has that
            entry["archive"] = archive
        }
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let store = try Self.store(try TemporaryDirectory())
        await #expect {
            try await Self.sync(store, nginx.url("manifest.json"))
        } throws: { error in "\(error)".contains("not enough free space") }
        #expect(nginx.requestCount(path: "/" + repo.archiveURL("home")) == 0)
    }

    @Test func concurrentSyncsOfOneUpdaterJoinTheSameSync() async throws {
        let repo = try Self.repo()
        let nginx = try NginxServer(documentRoot: repo.path)
        let updater = Updater(store: try Self.store(try TemporaryDirectory()), manifestURL: nginx.url("manifest.json"))
        async let first = updater.sync()
        async let second = updater.sync()
        let (a, b) = try await (first, second)
        #expect(a == b && a.outcome == .activated)
        #expect(nginx.waitForRequests(2).filter { $0.uri == "/manifest.json" }.count == 1)
    }

    @Test func backgroundUpdatesSyncAtStartAndReportEvents() async throws {
        let repo = try Self.repo()
        let store = try Self.store(try TemporaryDirectory())
        let events = EventLog()
        let updater = Updater(
            store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath),
            options: .init(minInterval: 3600, events: { events.append($0) }))
        updater.start()
        defer { updater.stop() }
        for _ in 0..<100 where store.activeSet.generation == 0 { try await Task.sleep(nanoseconds: 50_000_000) }
        #expect(try Self.served(store) == "home 1")
        let names = events.all.map { String(describing: $0).prefix { $0 != "(" }.description }
        #expect(
            names.first == "checking" && names.contains("downloadStarted") && names.contains("downloadProgress")
                && names.last == "activated")
    }

    @Test func aNextLaunchReaderKeepsItsSetUntilReopened() async throws {
        let repo = try Self.repo()
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Self.sync(try Self.store(root), url)
        let shell = try PackageStore(root: root.url, options: .init(watchInterval: 0.1, activation: .nextLaunch))
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        _ = try await Updater(store: shell, manifestURL: url).sync()
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(try Self.served(shell) == "home 1")
        #expect(try Self.served(try Self.store(root)) == "home 2")
    }

    @Test func anImmediateReaderSeesAnotherProcesssSwitchWithinASecond() async throws {
        let repo = try Self.repo()
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Self.sync(try Self.store(root), url)
        let shell = try PackageStore(root: root.url, options: .init(watchInterval: 0.5))
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        try await InProcessCLI.run(["sync", repo.manifestPath, "--root", root.path, "--quiet"]).checked()
        let switched = Date()
        while try Self.served(shell) != "home 2" && Date().timeIntervalSince(switched) < 3 {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        #expect(Date().timeIntervalSince(switched) < 1.0)
    }

    @Test func retryAfterIsHonoured() async throws {
        let repo = try Self.repo()
        let server = try FaultServer(documentRoot: repo.path)
        server.script("/manifest.json", [.status(429, retryAfter: "1")])
        let start = Date()
        let report = try await Self.sync(
            try Self.store(try TemporaryDirectory()), server.url("manifest.json"),
            .init(retry: .init(attempts: 2, baseDelay: 0.01)))
        #expect(report.outcome == .activated)
        #expect(Date().timeIntervalSince(start) >= 1.0)
        #expect(server.requests(for: "/manifest.json").map(\.status) == [429, 200])
    }

    @Test func aFailedSyncIsReportedAsAnEvent() async throws {
        let events = EventLog()
        let store = try Self.store(try TemporaryDirectory())
        let updater = Updater(
            store: store, manifestURL: URL(fileURLWithPath: "/nonexistent/manifest.json"),
            options: .init(events: { events.append($0) }))
        await #expect(throws: OfflinePkgError.self) { try await updater.sync() }
        guard case .failed(let error) = try #require(events.all.last) else {
            Issue.record("expected a failed event last, got \(events.all)")
            return
        }
        #expect("\(error)".contains("/nonexistent/manifest.json"))
    }
}
