import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// Every installed file held once by content (`content/<hex digit>/<sha256>`), trees of hard links to it:
/// shared across packages and versions, collected when no tree links it, checked and repaired by verify.
@Suite("Content store")
struct ContentStoreTests {
    static let vendor = (0..<8).map { SiteFile("vendor/lib\($0).js", bytes: pattern(40_000, seed: $0)) }

    static func pattern(_ count: Int, seed: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: ($0 &+ seed &* 7_919) &* 2_654_435_761 >> 13) }
    }

    /// Inode and link count of `path` (0, 0 when missing).
    static func inode(_ path: String) -> (ino: UInt, links: UInt) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return (0, 0) }
        return (UInt(info.st_ino), UInt(info.st_nlink))
    }

    /// Every held file's name (its sha256).
    static func held(_ layout: CacheLayout) -> Set<String> {
        var names = Set<String>()
        for shard in FileSystem.contents(of: layout.content) where !shard.hasPrefix(".") {
            names.formUnion(FileSystem.contents(of: layout.contentShard(shard)))
        }
        return names
    }

    /// Damages a held (read-only) file in place, through its inode: every tree linking it sees the change.
    static func overwrite(_ path: String, at offset: UInt64, with bytes: [UInt8]) throws {
        #expect(chmod(path, 0o644) == 0)
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: offset)
        try handle.write(contentsOf: bytes)
        try handle.close()
        #expect(chmod(path, 0o444) == 0)
    }

    static func status(_ root: String) async throws -> [String: Any] {
        let result = try await InProcessCLI.run(["status", "--root", root, "--json"]).checked("status")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    struct Device {
        let repo: TestRepository
        let nginx: NginxServer
        let root: TemporaryDirectory
        var layout: CacheLayout { CacheLayout(root: root.path) }
        var manifest: String { nginx.url("manifest.json").absoluteString }

        init() throws {
            repo = try TestRepository()
            try repo.add("a", "1", routes: ["https://a.example.com/"], files: [SiteFile("index.html", "a 1")] + ContentStoreTests.vendor)
            try repo.add("b", "1", routes: ["https://b.example.com/"], files: [SiteFile("index.html", "b 1")] + ContentStoreTests.vendor)
            try repo.publish()
            nginx = try NginxServer(documentRoot: repo.path)
            root = try TemporaryDirectory(prefix: "offlinepkg-content")
        }

        @discardableResult
        func sync() async -> ProcessResult {
            await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"])
        }

        /// A sync in a process of its own, with `environment` (a fail point that kills it).
        func syncInAProcess(_ environment: [String: String]) throws -> ProcessResult {
            try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"], environment: environment)
        }

        func tree(_ id: String, _ version: String) throws -> String {
            let published = try CrashSafetyTests.published(repo)
            return layout.tree(id: id, version: version, treeHash: try #require(published[id]).tree)
        }

        /// Publishes and syncs `a 2`: a new page and a new `vendor/lib0.js`, the other 7 files as in 1;
        /// then syncs once more, which takes in the new content that a sync of one package leaves to the
        /// next run (`ContentStore.takeInPendingTrees`).
        func updateTwoFilesOfA() async throws -> (files: [SiteFile], tree: String) {
            var files = [SiteFile("index.html", "a 2")] + ContentStoreTests.vendor
            files[1] = SiteFile("vendor/lib0.js", "lib0 of 2")
            try repo.add("a", "2", routes: ["https://a.example.com/"], files: files)
            try repo.publish()
            try await sync().checked("sync 2")
            try await sync().checked("the sync after sync 2")
            return (files, try tree("a", "2"))
        }

        /// The bytes of the file `lookup` answers `url` with.
        func lookup(_ url: String) async throws -> [UInt8] {
            let result = try await InProcessCLI.run(["lookup", url, "--root", root.path]).checked("lookup \(url)")
            return try FileSystem.read(String(result.stdout.dropLast()), limit: 1 << 20)
        }
    }

    /// One package, `home 1` (a page and the vendor files), served by nginx, and a root that has
    /// synced it once: its content is pending (a sync of one package leaves it to the next run).
    struct OnePackageDevice {
        let repo: TestRepository
        let nginx: NginxServer
        let root: TemporaryDirectory
        var layout: CacheLayout { CacheLayout(root: root.path) }

        init() async throws {
            repo = try TestRepository()
            try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")] + ContentStoreTests.vendor)
            try repo.publish()
            nginx = try NginxServer(documentRoot: repo.path)
            root = try TemporaryDirectory(prefix: "offlinepkg-content")
            try await sync("sync 1")
        }

        func sync(_ what: String) async throws {
            try await InProcessCLI.run(["sync", nginx.url("manifest.json").absoluteString, "--root", root.path, "--quiet"]).checked(what)
        }
    }

    @Test func twoPackagesSharingFilesStoreThemOnce() async throws {
        let device = try Device()
        try await device.sync().checked("sync")
        let a = try device.tree("a", "1")
        let b = try device.tree("b", "1")
        for file in Self.vendor {
            let sha256 = SHA256.hash(file.contents).hex
            let held = device.layout.content(sha256: sha256)
            let (inA, inB, inContent) = (Self.inode(a + "/" + file.path), Self.inode(b + "/" + file.path), Self.inode(held))
            #expect(inA.ino != 0 && inA.ino == inB.ino && inB.ino == inContent.ino, "\(file.path) is not one inode")
            #expect(inContent.links == 3, "\(file.path): content, a's tree and b's tree link it")
            var info = stat()
            #expect(lstat(held, &info) == 0 && info.st_mode & 0o7777 == 0o400)
        }
        // Each package's own page is held too, alone.
        #expect(Self.inode(a + "/index.html").links == 2 && Self.inode(a + "/index.html").ino != Self.inode(b + "/index.html").ino)
        // The lookup path answers each package's files through its own tree.
        await #expect(try device.lookup("https://a.example.com/") == Array("a 1".utf8))
        await #expect(try device.lookup("https://b.example.com/vendor/lib3.js") == Self.vendor[3].contents)
        // status counts the held files once: 8 shared, 2 pages.
        let content = try await #require(try Self.status(device.root.path)["content"] as? [String: Any])
        #expect(content["files"] as? Int == 10)
        #expect(content["bytes"] as? Int == 8 * 40_000 + 6)
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify")
    }

    /// A root in the older layout holds its content in 256 folders (`content/<2 hex>/<sha256>`): the next
    /// sync moves each held file to its new name as the same inode, finishes a move that a kill left with
    /// both names, and links the update's unchanged files to the moved content rather than copy them.
    @Test func aRootWithTheOldContentLayoutIsMovedAndItsContentStaysShared() async throws {
        let device = try Device()
        try await device.sync().checked("sync")
        let layout = device.layout
        var inodes = [String: UInt]()
        for sha256 in Self.held(layout) {
            inodes[sha256] = Self.inode(layout.content(sha256: sha256)).ino
            try FileSystem.makeDirectories(layout.contentShard(sha256.prefix(2)))
            try FileSystem.hardLink(layout.content(sha256: sha256), to: layout.contentShard(sha256.prefix(2)) + "/" + sha256)
        }
        #expect(inodes.count == 10)
        // The move a kill interrupted: one file has both names; every other has only its old one, and
        // no new folder but that file's is left.
        let both = SHA256.hash(Self.vendor[2].contents).hex
        for sha256 in inodes.keys where sha256 != both { try FileSystem.removeFile(layout.content(sha256: sha256)) }
        for shard in FileSystem.contents(of: layout.content) where shard.utf8.count == 1 { rmdir(layout.contentShard(shard)) }
        #expect(FileSystem.contents(of: layout.content).filter { $0.utf8.count == 1 } == [String(both.prefix(1))])
        // Until it is moved, status and verify read the old layout too, each file once.
        let before = try await #require(try Self.status(device.root.path)["content"] as? [String: Any])
        #expect(before["files"] as? Int == 10)

        let (two, second) = try await device.updateTwoFilesOfA()
        #expect(!FileSystem.contents(of: layout.content).contains { $0.utf8.count == 2 }, "an old folder is left")
        for (sha256, ino) in inodes {
            let held = Self.inode(layout.content(sha256: sha256))
            #expect(held.ino == ino, "\(sha256) is another inode now")
            #expect(held.links > 1, "\(sha256) is held by no tree")
        }
        // The update's unchanged files are the moved content's inodes, its two new files held as well.
        for file in two {
            let sha256 = SHA256.hash(file.contents).hex
            #expect(Self.inode(second + "/" + file.path).ino == Self.inode(layout.content(sha256: sha256)).ino, "\(file.path)")
            if file.path.hasPrefix("vendor/"), file.path != "vendor/lib0.js" {
                #expect(Self.inode(second + "/" + file.path).ino == inodes[sha256], "\(file.path) was copied, not linked")
            }
        }
        // Counted once each: the file that had two names too.
        let content = try await #require(try Self.status(device.root.path)["content"] as? [String: Any])
        #expect(content["files"] as? Int == 12)
        #expect(content["bytes"] as? Int == 8 * 40_000 + 6 + 3 + 9)
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify")
    }

    /// A package whose new files cannot be taken into content/ (here a folder stands at one file's
    /// content name, as a full disk would refuse a shard's growth) fails alone: the other package's
    /// verified tree is installed all the same, nothing of the failed one stays in staging or content/,
    /// and the next sync fetches only the package that failed.
    @Test func aPackageWhoseContentCannotBeTakenInFailsAloneAndTheOtherIsKept() async throws {
        let device = try Device()
        try await device.sync().checked("sync 1")
        try device.repo.add("a", "2", routes: ["https://a.example.com/"], files: [SiteFile("index.html", "a 2")] + Self.vendor)
        let blocked = SiteFile("extra.js", "b's new file")
        try device.repo.add("b", "2", routes: ["https://b.example.com/"], files: [SiteFile("index.html", "b 2"), blocked] + Self.vendor)
        try device.repo.publish()
        let obstacle = device.layout.content(sha256: SHA256.hash(blocked.contents).hex)
        try FileSystem.makeDirectories(obstacle)

        let failed = await InProcessCLI.run(["sync", device.manifest, "--root", device.root.path])
        #expect(failed.status != 0, "\(failed.stderr)")
        #expect(failed.stderr.contains("failed b:") && !failed.stderr.contains("failed a:"), "\(failed.stderr)")
        // a's version 2 is installed (not active: the release is incomplete), b's is not.
        #expect(FileSystem.isDirectory(try device.tree("a", "2")))
        #expect(!FileSystem.exists(try device.tree("b", "2")))
        await #expect(try device.lookup("https://b.example.com/") == Array("b 1".utf8))
        #expect(FileSystem.contents(of: device.layout.staging).isEmpty, "\(FileSystem.contents(of: device.layout.staging))")
        // Whatever b's take-in linked before the failure is linked by no tree now: never trusted, and
        // collected by the next sync that succeeds (checked below).
        #expect(!ContentStore(layout: device.layout).contains(sha256: SHA256.hash(Array("b 2".utf8)).hex))

        try FileSystem.removeTree(obstacle)
        let next = try await InProcessCLI.run(["sync", device.manifest, "--root", device.root.path]).checked("sync 3")
        #expect(next.stderr.contains("fetching b 2") && !next.stderr.contains("fetching a"), "\(next.stderr)")
        await #expect(try device.lookup("https://b.example.com/extra.js") == blocked.contents)
        await #expect(try device.lookup("https://a.example.com/") == Array("a 2".utf8))
        for sha256 in Self.held(device.layout) {
            #expect(Self.inode(device.layout.content(sha256: sha256)).links > 1, "\(sha256) is an orphan")
        }
        try await ContentUsageTests.expectFigureMatchesAWalk(device.root, "after the sync that installed b")
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify")
    }

    /// A sync of one package installs its tree without taking its new content in (a directory entry a
    /// file, a quarter of a cold sync's CPU): it lists the content in `content/.pending/`, and the next
    /// run links each file from the installed tree. Until then the tree works and verifies, and a file
    /// that another of the tree's files repeats is already one inode with it; after it every file is its
    /// held content's inode, the list is gone, the figure is a walk's, and a later version shares the
    /// content. (A dry run counts listed content as held: FileFetchTests.theDryRunAndStatusShowTheWay….)
    @Test func aSinglePackagesNewContentIsTakenInByTheNextRun() async throws {
        let repo = try TestRepository()
        let copy = SiteFile("copy-of-lib0.js", bytes: Self.vendor[0].contents)
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1"), copy] + Self.vendor)
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory(prefix: "offlinepkg-content")
        let layout = CacheLayout(root: root.path)
        let manifest = nginx.url("manifest.json").absoluteString
        let sync = { (what: String) in try await InProcessCLI.run(["sync", manifest, "--root", root.path, "--quiet"]).checked(what) }
        let lookup = { (url: String) in try await InProcessCLI.run(["lookup", url, "--root", root.path]).checked("lookup").stdout }
        try await sync("sync 1")
        let published = try CrashSafetyTests.published(repo)
        let one = layout.tree(id: "home", version: "1", treeHash: try #require(published["home"]).tree)
        let list = layout.pendingContent(ofTree: one)
        let listed = Set(try String(contentsOfFile: list, encoding: .utf8).split(separator: "\n").map(String.init))
        let files = [SiteFile("index.html", "home 1"), copy] + Self.vendor
        #expect(listed == Set(files.map { SHA256.hash($0.contents).hex }), "the list names each new content once")
        #expect(Self.held(layout).isEmpty, "\(Self.held(layout))")
        #expect(Self.inode(one + "/" + copy.path).ino == Self.inode(one + "/vendor/lib0.js").ino, "a repeated file is its own inode")
        await #expect(try FileSystem.read(String(lookup("https://m.example.com/vendor/lib3.js").dropLast()), limit: 1 << 20) == Self.vendor[3].contents)
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify with content pending")

        try await sync("the sync after")
        #expect(!FileSystem.exists(list))
        for file in files {
            let held = Self.inode(layout.content(sha256: SHA256.hash(file.contents).hex))
            #expect(held.ino != 0 && held.ino == Self.inode(one + "/" + file.path).ino, "\(file.path) is not its held content")
        }
        #expect(Self.inode(layout.content(sha256: SHA256.hash(copy.contents).hex)).links == 3)
        try await ContentUsageTests.expectFigureMatchesAWalk(root, "after the take-in")
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify after the take-in")

        // Version 2 shares the vendor files with 1, through content/.
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")] + Self.vendor)
        try repo.publish()
        try await sync("sync 2")
        let two = layout.tree(id: "home", version: "2", treeHash: try #require(try CrashSafetyTests.published(repo)["home"]).tree)
        for file in Self.vendor { #expect(Self.inode(two + "/" + file.path).ino == Self.inode(one + "/" + file.path).ino, "\(file.path)") }
        #expect(Set(try String(contentsOfFile: layout.pendingContent(ofTree: two), encoding: .utf8).split(separator: "\n"))
            == [Substring(SHA256.hash(Array("home 2".utf8)).hex)])
    }

    /// What a kill leaves does not stop the take-in: an orphan at a listed content name (a held file no
    /// tree links) is replaced by the tree's file, and with the figure left open, the take-in's close
    /// walks and collects the other orphans rather than count them (the sync's own close would then
    /// count them, closed, for good).
    @Test func theTakeInReplacesAnOrphanAndCollectsTheOthersAKillLeft() async throws {
        let device = try await OnePackageDevice()
        let (layout, root) = (device.layout, device.root)
        let page = layout.content(sha256: SHA256.hash(Array("home 1".utf8)).hex)
        let stray = layout.content(sha256: SHA256.hash(Array("left by a kill".utf8)).hex)
        for (path, bytes) in [(page, "stale"), (stray, "left by a kill")] {
            try FileSystem.makeDirectories(URL(fileURLWithPath: path).deletingLastPathComponent().path)
            try FileSystem.write(Array(bytes.utf8), to: path, mode: 0o444)
        }
        try FileSystem.writeAtomically(Array(#"{"files":2,"bytes":19,"open":"killed"}"#.utf8), to: layout.contentUsage)

        try await device.sync("the sync after")
        let tree = layout.tree(id: "home", version: "1", treeHash: try #require(try CrashSafetyTests.published(device.repo)["home"]).tree)
        #expect(Self.inode(page).ino == Self.inode(tree + "/index.html").ino, "the orphan was not replaced")
        #expect(try FileSystem.read(page) == Array("home 1".utf8))
        #expect(!FileSystem.exists(stray), "the other orphan is still held")
        for sha256 in Self.held(layout) { #expect(Self.inode(layout.content(sha256: sha256)).links > 1, "\(sha256) is an orphan") }
        #expect(Self.held(layout).count == 9)
        try await ContentUsageTests.expectFigureMatchesAWalk(root, "after the take-in")
        try await InProcessCLI.run(["verify", "--root", root.path]).checked("verify")
    }

    /// A list whose tree is not installed (a kill between the list and the tree's rename, or a tree
    /// collected since) is dropped by the next run, as is a name no list has; `gc` takes content in too.
    @Test func aPendingListWithoutItsTreeIsDroppedAndGCTakesContentIn() async throws {
        let device = try await OnePackageDevice()
        let (layout, root) = (device.layout, device.root)
        let stray = layout.pendingContent(ofTree: layout.tree(id: "home", version: "0", treeHash: String(repeating: "0", count: 64)))
        try FileSystem.write(Array((SHA256.hash(Array("nothing".utf8)).hex + "\n").utf8), to: stray)
        try FileSystem.write(Array("x".utf8), to: layout.pendingContent + "/not a list")
        try await InProcessCLI.run(["gc", "--root", root.path]).checked("gc")
        #expect(FileSystem.contents(of: layout.pendingContent).isEmpty, "\(FileSystem.contents(of: layout.pendingContent))")
        #expect(Self.held(layout).count == 9)
        for sha256 in Self.held(layout) { #expect(Self.inode(layout.content(sha256: sha256)).links == 2, "\(sha256)") }
        try await ContentUsageTests.expectFigureMatchesAWalk(root, "after gc")
    }

    @Test func anUpdateSharesItsUnchangedFilesAndGCRemovesExactlyWhatOnlyTheOldVersionUsed() async throws {
        let device = try Device()
        try await device.sync().checked("sync 1")
        let one = try device.tree("a", "1")
        // Version 2 changes 2 of the 9 files; version 3 changes another one.
        let (two, second) = try await device.updateTwoFilesOfA()
        for file in two {
            let shared = Self.inode(one + "/" + file.path).ino == Self.inode(second + "/" + file.path).ino
            #expect(shared == (file.path != "index.html" && file.path != "vendor/lib0.js"), "\(file.path)")
        }
        let onlyOne: Set = [SHA256.hash(Array("a 1".utf8)).hex, SHA256.hash(Self.vendor[0].contents).hex]
        // lib0's old bytes are still in b, so only a's first page is content that only version 1 used.
        let removable: Set = [SHA256.hash(Array("a 1".utf8)).hex]
        let before = Self.held(device.layout)
        #expect(before.isSuperset(of: onlyOne))

        var three = two
        three[2] = SiteFile("vendor/lib1.js", "lib1 of 3")
        try device.repo.add("a", "3", routes: ["https://a.example.com/"], files: three)
        try device.repo.publish()
        try await device.sync().checked("sync 3")
        try await device.sync().checked("the sync after sync 3")
        // Version 1 is neither active nor previous: gc (the sync's last stage) removed its tree, then
        // exactly the content no other tree links.
        #expect(!FileSystem.exists(one))
        let after = Self.held(device.layout)
        #expect(before.subtracting(after) == removable)
        #expect(after.subtracting(before) == [SHA256.hash(Array("lib1 of 3".utf8)).hex])
        await #expect(try device.lookup("https://a.example.com/vendor/lib1.js") == Array("lib1 of 3".utf8))
        // No held file is left that no tree links.
        for sha256 in after { #expect(Self.inode(device.layout.content(sha256: sha256)).links > 1, "\(sha256) is an orphan") }
    }
}
