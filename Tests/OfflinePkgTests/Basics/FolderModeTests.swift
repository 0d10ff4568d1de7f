import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `makeFoldersReadOnly` (`Staging.stage`) names each folder below a descriptor of the tree's root:
/// the archive rules bound a path inside the tree to 4,095 bytes, not the root's path in front of it.
@Suite struct FolderModeTests {
    @Test func sealsAFolderWhosePathWithTheRootPassesPathMax() throws {
        let scratch = try TemporaryDirectory()
        let long = String(repeating: "r", count: 250)
        let root = try scratch.makeDirectory(long)
        // 20 names of 199 bytes: a 3,999-byte path inside the tree, well within the rules.
        let name = String(repeating: "n", count: 199)
        var folder = try FileDescriptor.openFolder(path: root)
        var path = [String]()
        for _ in 0..<20 {
            try folder.makeFolder(name, mode: 0o700)
            let child = try folder.openFolder(name)
            folder.close()
            folder = child
            path.append(name)
        }
        folder.close()
        let deepest = PackagePath(bytes: Array(path.joined(separator: "/").utf8))
        #expect(root.utf8.count + 1 + deepest.bytes.count > Int(PATH_MAX))

        try FileSystem.makeFoldersReadOnly([deepest], under: root)

        let top = try FileDescriptor.openFolder(path: root)
        defer { top.close() }
        var info = stat()
        #expect(fstatat(top.rawValue, deepest.string, &info, AT_SYMLINK_NOFOLLOW) == 0)
        #expect(info.st_mode & 0o7777 == 0o500)
    }
}
