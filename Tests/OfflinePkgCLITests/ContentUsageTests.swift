import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// The running figure of held content (`content.json`, `ContentLedger`): a sync that changes little, and
/// `status`, cost what changed rather than a stat of every held file; the figure matches a walk of
/// `content/` after every insert, removal and kill, and a root without one gets it from one walk.
@Suite("Content usage")
struct ContentUsageTests {
    /// What a walk of `content/` finds: held files and their bytes.
    static func walked(_ layout: CacheLayout) -> (files: Int, bytes: Int64) {
        var files = 0
        var bytes: Int64 = 0
        for shard in FileSystem.contents(of: layout.content) where !shard.hasPrefix(".") {
            for name in FileSystem.contents(of: layout.contentShard(shard)) {
                files += 1
                bytes += FileSystem.fileSize(layout.contentShard(shard) + "/" + name) ?? 0
            }
        }
        return (files, bytes)
    }

    static func statusFigure(_ root: String) async throws -> (files: Int, bytes: Int64) {
        let content = try await #require(try ContentStoreTests.status(root)["content"] as? [String: Any])
        return (try #require(content["files"] as? Int), Int64(try #require(content["bytes"] as? Int)))
    }

    /// `content.json` as written: nil when missing; `open` when a session left it open.
    static func figureFile(_ layout: CacheLayout) throws -> [String: Any]? {
        guard let data = FileManager.default.contents(atPath: layout.contentUsage) else { return nil }
        return try JSONSerialization.jsonObject(with: data) as? [String: Any]
    }

    static func expectFigureMatchesAWalk(_ root: TemporaryDirectory, closed: Bool = true, _ what: String) async throws {
        let layout = CacheLayout(root: root.path)
        let walk = walked(layout)
        let shown = try await statusFigure(root.path)
        #expect(shown.files == walk.files && shown.bytes == walk.bytes, "\(what): status \(shown), walk \(walk)")
        if closed {
            let file = try #require(try figureFile(layout), "\(what): no content.json")
            #expect(file["open"] == nil, "\(what): \(file)")
            #expect(file["files"] as? Int == walk.files && (file["bytes"] as? Int).map(Int64.init) == walk.bytes, "\(what): \(file)")
        }
    }

    /// The traced calls that name a held file (`content/<hex digit>/<sha256>`).
    static func heldFileCalls(_ run: Strace.Run) -> [String] {
        run.calls(containing: "/content/").filter { $0.contains(/\/content\/[0-9a-f]\/[0-9a-f]{64}/) }
    }

    /// A big package of `count` files that never changes, and a small one that changes at each version.
    static func device(bigFiles count: Int) throws -> ContentStoreTests.Device {
        let device = try ContentStoreTests.Device()
        let big = (0..<count).map { SiteFile("f/\($0 / 100)/\($0).js", "big file \($0)") }
        try device.repo.add("big", "1", routes: ["https://big.example.com/"], files: big)
        try device.repo.publish()
        return device
    }

    static func publishSmall(_ device: ContentStoreTests.Device, _ version: Int) throws {
        try device.repo.add(
            "a", "\(version)", routes: ["https://a.example.com/"],
            files: [SiteFile("index.html", "a \(version)"), SiteFile("app.js", "app \(version)")] + ContentStoreTests.vendor)
        try device.repo.publish()
    }

    /// Syncs on a root of about 2,000 held files that change one small package stat a few dozen held
    /// files, not 2,000 (the collection used to walk all of `content/`), and `status` stats none; the
    /// old version's own content still goes, and the figure stays that of a walk.
    @Test func aSyncThatChangesLittleAndStatusDoNotStatEveryHeldFile() async throws {
        let count = 2000
        let device = try Self.device(bigFiles: count)
        try await device.sync().checked("sync 1")
        try await Self.expectFigureMatchesAWalk(device.root, "after the first sync")
        try Self.publishSmall(device, 2)
        try await device.sync().checked("sync 2")
        try Self.publishSmall(device, 3)
        let held = ContentStoreTests.held(device.layout)
        #expect(held.count > count)
        // Version 3: a's version 1 tree is collected (neither active nor previous), with its own content.
        let traced = try Strace.offlinepkg(["sync", device.manifest, "--root", device.root.path, "--quiet"], trace: Strace.statCalls)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        // The trace sees the sync's stats at all (of its staging, trees and downloads).
        #expect(traced.calls(containing: device.root.path).count > 20, "\(traced.calls.prefix(5))")
        let touched = Self.heldFileCalls(traced)
        #expect(touched.count < 100, "\(touched.count) stat calls on content/, of \(held.count) held files")
        #expect(!held.subtracting(ContentStoreTests.held(device.layout)).isEmpty, "a's version 1 content was not collected")
        for sha256 in ContentStoreTests.held(device.layout) {
            #expect(ContentStoreTests.inode(device.layout.content(sha256: sha256)).links > 1, "\(sha256) is an orphan")
        }
        try await Self.expectFigureMatchesAWalk(device.root, "after sync 3")
        let status = try Strace.offlinepkg(["status", "--root", device.root.path, "--json"], trace: Strace.statCalls)
        #expect(status.result.status == 0, "\(status.result.stderr)")
        #expect(Self.heldFileCalls(status).isEmpty, "\(Self.heldFileCalls(status).prefix(5))")
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify")
    }

    /// A root from a release that kept no figure: `status` walks (and is right), the next sync that
    /// changes content walks once and writes the figure, and from then on it is kept.
    @Test func aRootWithoutAFigureGetsOneFromOneWalk() async throws {
        let device = try ContentStoreTests.Device()
        try await device.sync().checked("sync 1")
        FileSystem.discardFile(device.layout.contentUsage)
        try await Self.expectFigureMatchesAWalk(device.root, closed: false, "without content.json")
        #expect(try Self.figureFile(device.layout) == nil, "status wrote content.json")
        _ = try await device.updateTwoFilesOfA()
        try await Self.expectFigureMatchesAWalk(device.root, "after the sync that walked")
        try Self.publishSmall(device, 3)
        try await device.sync().checked("sync 3")
        try await Self.expectFigureMatchesAWalk(device.root, "after a counted sync")
        // `gc` walks whatever the figure says, and writes it afresh.
        FileSystem.discardFile(device.layout.contentUsage)
        try await InProcessCLI.run(["gc", "--root", device.root.path]).checked("gc")
        try await Self.expectFigureMatchesAWalk(device.root, "after gc")
    }

    /// `kill -9` while a sync takes content in, after its unpack, and after its switch: the figure is left open
    /// (never believed: `status` walks and is right), and the next sync closes it right.
    @Test(arguments: ["content-link", "after-unpack", "after-switch"])
    func aKilledSyncLeavesTheFigureOpenAndTheNextSyncRight(_ failpoint: String) async throws {
        let device = try ContentStoreTests.Device()
        try await device.sync().checked("sync 1")
        try Self.publishSmall(device, 2)
        if failpoint == "content-link" {
            // A sync of one package leaves its new content to the next sync's start: that one dies there.
            try await device.sync().checked("sync 2")
        }
        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = failpoint
        let killed = try device.syncInAProcess(environment)
        #expect(killed.status == 128 + SIGKILL, "\(failpoint): \(killed.stderr)")
        #expect(try Self.figureFile(device.layout)?["open"] != nil, "\(failpoint): the figure is not open")
        try await Self.expectFigureMatchesAWalk(device.root, closed: false, "after the kill at \(failpoint)")
        try Self.publishSmall(device, 3)
        try await device.sync().checked("sync after the kill")
        try await Self.expectFigureMatchesAWalk(device.root, "after the next sync")
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify")
    }

    /// `kill -9` in a collection right after it removed an unused tree, before the content only that
    /// tree linked is collected: that content is down to its own name, and the removed tree's list of
    /// it is gone. The figure was opened before the tree went, so the next collection walks `content/`,
    /// collects those orphans and closes the figure right; without that, a closed figure was believed
    /// and they stayed for good.
    @Test func aCollectionKilledAfterRemovingATreeLeavesNoOrphanForGood() async throws {
        let device = try ContentStoreTests.Device()
        try await device.sync().checked("sync 1")
        let one = try device.tree("a", "1")
        try Self.publishSmall(device, 2)
        try await device.sync().checked("sync 2")
        try Self.publishSmall(device, 3)
        // A reader holding version 1 keeps it through sync 3's own collection (whose session, opened by
        // its inserts, would hide what this test is after); then the reader goes.
        try FileSystem.makeDirectories(device.layout.leases)
        let lease = open(device.layout.lease("reader-of-1"), O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        try #require(lease >= 0 && flock(lease, LOCK_EX) == 0)
        _ = Array((one + "\n").utf8).withUnsafeBytes { write(lease, $0.baseAddress, $0.count) }
        try await device.sync().checked("sync 3")
        #expect(FileSystem.exists(one), "version 1 collected while a reader held it")
        close(lease)
        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = "gc-after-tree"
        let killed = try OfflinePkgBinary.run(["gc", "--root", device.root.path], environment: environment)
        #expect(killed.status == 128 + SIGKILL, "\(killed.stderr)")
        #expect(!FileSystem.exists(one))
        let orphans = { ContentStoreTests.held(device.layout).filter { ContentStoreTests.inode(device.layout.content(sha256: $0)).links == 1 } }
        #expect(!orphans().isEmpty, "the kill left no orphan: the fail point is not between the tree and its content")
        #expect(try Self.figureFile(device.layout)?["open"] != nil, "the figure is closed with orphans left uncounted")
        try await Self.expectFigureMatchesAWalk(device.root, closed: false, "after the kill")
        // A sync's collection trusts a closed figure and looks only at the content of trees it removes
        // (`gc` would walk anyway): only the open figure makes it walk and find those orphans.
        try Self.publishSmall(device, 4)
        try await device.sync().checked("sync 4")
        #expect(orphans().isEmpty, "held files no tree links, left after the next collection: \(orphans())")
        try await Self.expectFigureMatchesAWalk(device.root, "after the next collection")
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify")
    }

    /// A closed figure that is wrong (a release that did not keep it changed the root): `verify` names
    /// it, and `verify --repair` writes the walked one.
    @Test func verifyNamesAWrongFigureAndRepairWritesTheRightOne() async throws {
        let device = try ContentStoreTests.Device()
        try await device.sync().checked("sync")
        try FileSystem.writeAtomically(Array(#"{"files":1,"bytes":2}"#.utf8), to: device.layout.contentUsage)
        let verify = await InProcessCLI.run(["verify", "--root", device.root.path])
        #expect(verify.status != 0)
        #expect(verify.stdout.contains("content.json") || verify.stderr.contains("content.json"), "\(verify)")
        #expect((verify.stdout + verify.stderr).contains("counts 1 files of 2 bytes"), "\(verify)")
        try await InProcessCLI.run(["verify", "--root", device.root.path, "--repair"]).checked("repair")
        try await Self.expectFigureMatchesAWalk(device.root, "after the repair")
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify after the repair")
    }

    /// A held file damaged in place that the next version shares: the sync's unpack hashes it before
    /// linking the new tree's file to it, drops it, says so, and keeps the sound bytes it just wrote.
    @Test func damagedHeldContentIsNotLinkedIntoTheNextVersion() async throws {
        let device = try ContentStoreTests.Device()
        try await device.sync().checked("sync 1")
        let lib3 = ContentStoreTests.vendor[3]
        let held = device.layout.content(sha256: SHA256.hash(lib3.contents).hex)
        try ContentStoreTests.overwrite(held, at: 10, with: Array("rot".utf8))
        try Self.publishSmall(device, 2)
        let synced = await InProcessCLI.run(["sync", device.manifest, "--root", device.root.path])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(synced.stderr.contains("damaged held content \(held)"), "\(synced.stderr)")
        await #expect(try device.lookup("https://a.example.com/vendor/lib3.js") == lib3.contents)
        #expect(try FileHasher.sha256(ofFile: held) == SHA256.hash(lib3.contents).hex)
        try await Self.expectFigureMatchesAWalk(device.root, "after the drop")
    }
}
