import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `FileSystem.removeTree` on trees an archive can shape: a staging tree is removed when its sync
/// fails, and an installed one when garbage collection drops it, on the work thread's bounded stack.
@Suite struct RemoveTreeTests {
    /// Far less stack than the work thread's 4 MiB: a walk that recursed per level would need it.
    static let smallStack = 256 << 10

    /// A chain of `depth` folders named `d` below `top`, made through descriptors (the deeper ones have
    /// paths longer than PATH_MAX), holding four 0400 files and a link to `outside` at the bottom;
    /// every folder read-only, 0500, as an installed tree's are.
    static func makeChain(depth: Int, below top: String, linkTo outside: String) throws {
        var folder = try FileDescriptor.openFolder(path: top)
        for _ in 0..<depth {
            try folder.makeFolder("d", mode: 0o700)
            let child = try folder.openFolder("d")
            try folder.setMode(0o500)
            folder.close()
            folder = child
        }
        for name in ["a", "b", "c", "e"] {
            let file = try folder.createFile(name, mode: 0o400)
            try file.writeAll(Array("\(name)\n".utf8), path: name)
            file.close()
        }
        #expect(symlinkat(outside, folder.rawValue, "link") == 0, "symlinkat: \(errno)")
        try folder.setMode(0o500)
        folder.close()
    }

    /// Runs `removeTree(path)` on a thread with `stackSize` bytes of stack, as the work thread runs it.
    static func removeTree(_ path: String, stackSize: Int) async -> (any Error)? {
        await withCheckedContinuation { (done: CheckedContinuation<(any Error)?, Never>) in
            let started = OSThread.start(name: "test.remove", stackSize: stackSize) {
                do {
                    try FileSystem.removeTree(path)
                    done.resume(returning: nil)
                } catch {
                    done.resume(returning: error)
                }
            }
            if !started { done.resume(returning: OfflinePkgError.io(path: path, operation: "pthread_create", Errno(EAGAIN))) }
        }
    }

    /// 1,000 levels fit in a path, so a recursive walk reaches the bottom (and overflows a small
    /// stack); 2,100 is deeper than the archive rules allow a path to go, beyond PATH_MAX.
    @Test(arguments: [1_000, 2_100])
    func removesADeepReadOnlyTreeOnASmallStack(depth: Int) async throws {
        let scratch = try TemporaryDirectory()
        let outside = try scratch.makeDirectory("outside")
        _ = try scratch.write("precious\n", to: "outside/kept")
        let tree = try scratch.makeDirectory("tree")
        try Self.makeChain(depth: depth, below: tree, linkTo: outside)
        try FileSystem.seal(tree)

        let error = await Self.removeTree(tree, stackSize: Self.smallStack)
        #expect(error == nil, "removeTree: \(String(describing: error))")
        #expect(!FileSystem.exists(tree))
        #expect(FileSystem.contents(of: outside) == ["kept"], "the walk followed the link out of the tree")
    }

    @Test func removesAFileAndIgnoresAMissingPath() throws {
        let scratch = try TemporaryDirectory()
        let file = try scratch.write("x", to: "file")
        try FileSystem.removeTree(file)
        #expect(!FileSystem.exists(file))
        try FileSystem.removeTree(scratch.path("missing"))
    }

    /// A link as the tree's own path is removed, not followed.
    @Test func removesALinkNamedAsTheTreeNotItsTarget() throws {
        let scratch = try TemporaryDirectory()
        let outside = try scratch.makeDirectory("outside")
        _ = try scratch.write("precious\n", to: "outside/kept")
        let link = scratch.path("tree")
        #expect(symlink(outside, link) == 0)
        try FileSystem.removeTree(link)
        #expect(!FileSystem.exists(link))
        #expect(FileSystem.contents(of: outside) == ["kept"])
    }

    /// A folder nobody may read (0000) inside the tree is opened up and removed, as before.
    @Test func removesAFolderItsOwnerCannotRead() throws {
        let scratch = try TemporaryDirectory()
        let tree = try scratch.makeDirectory("tree")
        _ = try scratch.makeDirectory("tree/locked")
        _ = try scratch.write("x", to: "tree/locked/file")
        #expect(chmod(scratch.path("tree/locked"), 0) == 0)
        try FileSystem.removeTree(tree)
        #expect(!FileSystem.exists(tree))
    }
}
