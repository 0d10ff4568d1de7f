import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// The content store checked and repaired by `verify`, and a root from before the store.
extension ContentStoreTests {
    @Test func verifyNamesADamagedContentFileAndEveryTreePathLinkingItAndRepairFixesIt() async throws {
        let device = try Device()
        try await device.sync().checked("sync")
        let sha256 = SHA256.hash(Self.vendor[2].contents).hex
        let held = device.layout.content(sha256: sha256)
        try Self.overwrite(held, at: 100, with: [Self.vendor[2].contents[100] ^ 0xff])

        let verify = await InProcessCLI.run(["verify", "--root", device.root.path, "--json"])
        #expect(verify.status == 4, "\(verify.stdout) \(verify.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [String: Any])
        let damaged = try #require(report["damaged"] as? [[String: Any]])
        let content = try #require(damaged.first { $0["packageID"] as? String == TreeDamage.contentStore })
        #expect(content["path"] as? String == held)
        let problem = try #require(content["problem"] as? String)
        for id in ["a", "b"] {
            #expect(problem.contains(try device.tree(id, "1") + "/vendor/lib2.js"), "\(problem)")
            #expect(damaged.contains { $0["packageID"] as? String == id && $0["path"] as? String == "vendor/lib2.js" }, "\(damaged)")
        }
        #expect(damaged.count == 3, "\(damaged)")

        let repair = await InProcessCLI.run(["verify", "--repair", "--root", device.root.path])
        #expect(repair.status == 0, "\(repair.stderr)")
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify after repair")
        #expect(try FileHasher.sha256(ofFile: held) == sha256)
        // Both trees link the one sound inode again, and the damaged one is gone from every tree.
        let sound = Self.inode(held)
        for id in ["a", "b"] { #expect(Self.inode(try device.tree(id, "1") + "/vendor/lib2.js").ino == sound.ino) }
        #expect(sound.links == 3)
    }

    @Test func repairGivenOnlyATreesEntryStillReplacesTheDamagedContentItLinks() async throws {
        let device = try Device()
        try await device.sync().checked("sync")
        let sha256 = SHA256.hash(Self.vendor[5].contents).hex
        let held = device.layout.content(sha256: sha256)
        try Self.overwrite(held, at: 0, with: [Self.vendor[5].contents[0] ^ 1])
        let store = try PackageStore(root: URL(fileURLWithPath: device.root.path))
        let treeEntries = try CacheRoot(store: store).verify().filter { $0.packageID == "a" }
        #expect(treeEntries.map(\.path) == ["vendor/lib5.js"])
        // Without the content entry, a reinstall of a would link the damaged held inode again.
        #expect(try await TreeRepairer(root: CacheRoot(store: store)).repair(treeEntries).contains("a"))
        #expect(try FileHasher.sha256(ofFile: held) == sha256)
        #expect(try CacheRoot(store: store).verify().isEmpty)
        #expect(Self.inode(try device.tree("b", "1") + "/vendor/lib5.js").ino == Self.inode(held).ino)
    }

    @Test func repairBringsBackDamagedContentThatOnlyThePreviousSetLinks() async throws {
        let device = try Device()
        try await device.sync().checked("sync 1")
        let one = try device.tree("a", "1")
        try device.repo.add("a", "2", routes: ["https://a.example.com/"], files: [SiteFile("index.html", "a 2")] + Self.vendor)
        try device.repo.publish()
        try await device.sync().checked("sync 2")
        let held = device.layout.content(sha256: SHA256.hash(Array("a 1".utf8)).hex)
        try Self.overwrite(held, at: 0, with: Array("a !".utf8))

        let verify = await InProcessCLI.run(["verify", "--root", device.root.path, "--json"])
        #expect(verify.status == 4)
        #expect(verify.stdout.contains(one + "/index.html"), "\(verify.stdout)")
        try await InProcessCLI.run(["verify", "--repair", "--root", device.root.path]).checked("repair")
        #expect(try FileHasher.sha256(ofFile: held) == SHA256.hash(Array("a 1".utf8)).hex)
        #expect(Self.inode(one + "/index.html").ino == Self.inode(held).ino)
        try await InProcessCLI.run(["rollback", "--root", device.root.path]).checked("rollback")
        await #expect(try device.lookup("https://a.example.com/") == Array("a 1".utf8))
    }

    @Test func aRootFromBeforeTheContentStoreKeepsWorkingAndItsNextSyncLinksIntoContent() async throws {
        let device = try Device()
        try await device.sync().checked("sync")
        // What today's release leaves: trees of plain files, each its own inode, and no content/.
        for id in ["a", "b"] {
            let tree = try device.tree(id, "1")
            try FileSystem.unseal(tree)
            try FileSystem.makeDirectories(tree + "/vendor")
            #expect(chmod(tree + "/vendor", 0o755) == 0)
            for file in [SiteFile("index.html", "")] + Self.vendor {
                let path = tree + "/" + file.path
                let bytes = try FileSystem.read(path)
                try FileSystem.removeFile(path)
                try FileSystem.write(bytes, to: path, mode: 0o444)
            }
            #expect(chmod(tree + "/vendor", 0o555) == 0)
            try FileSystem.seal(tree)
        }
        try FileSystem.removeTree(device.layout.content)
        // Nor the running figure of held content (content.json) that came with it.
        FileSystem.discardFile(device.layout.contentUsage)
        let one = try device.tree("a", "1")
        #expect(Self.inode(one + "/vendor/lib0.js").links == 1)
        await #expect(try device.lookup("https://a.example.com/") == Array("a 1".utf8))
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify of the old root")

        let (two, second) = try await device.updateTwoFilesOfA()
        for file in two {
            #expect(Self.inode(second + "/" + file.path).ino == Self.inode(device.layout.content(sha256: SHA256.hash(file.contents).hex)).ino)
        }
        await #expect(try device.lookup("https://a.example.com/vendor/lib0.js") == Array("lib0 of 2".utf8))
        // gc handles both kinds: the old plain tree of a goes with version 3, content stays for the trees using it.
        try device.repo.add("a", "3", routes: ["https://a.example.com/"], files: two + [SiteFile("new.txt", "3")])
        try device.repo.publish()
        try await device.sync().checked("sync 3")
        let three = try device.tree("a", "3")
        #expect(!FileSystem.exists(one) && FileSystem.exists(three))
        #expect(Self.inode(device.layout.content(sha256: SHA256.hash(Self.vendor[1].contents).hex)).links == 3)
        try await InProcessCLI.run(["verify", "--root", device.root.path]).checked("verify after the migration")
        await #expect(try device.lookup("https://b.example.com/vendor/lib1.js") == Self.vendor[1].contents)
    }
}
