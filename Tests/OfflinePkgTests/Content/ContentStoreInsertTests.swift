import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// `ContentStore`'s insert rules on a real root: the first copy of a content becomes the held inode, a
/// later one is dropped for it, an orphan (no tree links it) is replaced and never trusted, and gc's
/// pass removes what no tree links.
@Suite struct ContentStoreInsertTests {
    struct Scene {
        let directory: TemporaryDirectory
        let layout: CacheLayout
        let store: ContentStore

        init() throws {
            directory = try TemporaryDirectory(prefix: "offlinepkg-content-unit")
            layout = CacheLayout(root: directory.path("root"))
            try layout.prepare()
            store = ContentStore(layout: layout)
        }

        /// Writes `text` at `path` of the staging tree `tree` and inserts it.
        @discardableResult
        func write(_ text: String, at path: String, in tree: String) throws -> String {
            let staging = layout.stagingDirectory(tree)
            try FileSystem.makeDirectories(staging)
            let writer = try TreeWriter(root: staging, replacesFiles: false)
            try writer.writeFile(path) { file in try file.writeAll(Array(text.utf8), path: path) }
            #expect(try store.insert(sha256: SHA256.hash(Array(text.utf8)).hex, writtenBy: writer, at: PackagePath(path)))
            return staging + "/" + path
        }
    }

    static func inode(_ path: String) -> (ino: UInt, links: UInt) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return (0, 0) }
        return (UInt(info.st_ino), UInt(info.st_nlink))
    }

    @Test func theFirstCopyIsHeldALaterOneLinksItAndAnOrphanIsReplaced() throws {
        let scene = try Scene()
        let hello = SHA256.hash(Array("hello".utf8)).hex
        #expect(!scene.store.contains(sha256: hello))
        let first = try scene.write("hello", at: "x/a.txt", in: "t1")
        #expect(Self.inode(first).ino == Self.inode(scene.store.path(sha256: hello)).ino)
        #expect(scene.store.contains(sha256: hello))

        let second = try scene.write("hello", at: "c.txt", in: "t2")
        #expect(Self.inode(second).ino == Self.inode(first).ino && Self.inode(first).links == 3)

        // An orphan with the wrong bytes (a power cut before its sync's flush): not trusted, replaced.
        let world = SHA256.hash(Array("world".utf8)).hex
        try FileSystem.makeDirectories(FileSystem.parentPath(scene.store.path(sha256: world)))
        try FileSystem.write(Array("w0rld".utf8), to: scene.store.path(sha256: world), mode: 0o444)
        #expect(!scene.store.contains(sha256: world))
        let replaced = try scene.write("world", at: "b.txt", in: "t1")
        #expect(Self.inode(replaced).ino == Self.inode(scene.store.path(sha256: world)).ino)
        #expect(try FileSystem.read(scene.store.path(sha256: world)) == Array("world".utf8))

        // A file written in content/.tmp/ joins the store under its name; the temporary goes.
        let temporary = scene.store.temporaryPath()
        try FileSystem.write(Array("fetched".utf8), to: temporary, mode: 0o444)
        let fetched = SHA256.hash(Array("fetched".utf8)).hex
        try scene.store.insert(temporary: temporary, sha256: fetched)
        #expect(!FileSystem.exists(temporary) && FileSystem.exists(scene.store.path(sha256: fetched)))
        let writer = try TreeWriter(root: scene.layout.stagingDirectory("t2"), replacesFiles: false)
        try scene.store.link(sha256: fetched, into: writer, at: "deep/er/f.txt")
        #expect(Self.inode(scene.layout.stagingDirectory("t2") + "/deep/er/f.txt").ino == Self.inode(scene.store.path(sha256: fetched)).ino)

        // With the trees gone, nothing links the held files: gc's pass removes every one.
        try FileSystem.removeTree(scene.layout.staging)
        let removed = try scene.store.removeUnlinked(candidates: [], walk: false).map(\.path)
        #expect(Set(removed) == Set([hello, world, fetched].map { scene.store.path(sha256: $0) }))
        #expect(scene.store.usage().files == 0)
    }
}
