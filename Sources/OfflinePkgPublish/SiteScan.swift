import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// The entries of a site folder in path-byte order (so parents come before their children), checked
/// against what a device accepts: only regular files and folders, paths a device's unpacker takes.
package struct SiteScan: Sendable {
    package struct Entry: Sendable, Equatable {
        /// Relative path with `/` separators, no leading `./`.
        package var path: PackagePath
        package var isDirectory: Bool
        /// A file's size when it was scanned (0 for a folder): for the progress total only; the
        /// archive writers take each file's size from the file they open.
        package var size: Int64 = 0
    }

    package let root: String
    package let entries: [Entry]

    package var files: [PackagePath] { entries.filter { !$0.isDirectory }.map(\.path) }

    package init(site root: String) throws {
        // A site that is not there is a mistake in the command line (a usage error), not a refused input.
        guard FileSystem.isDirectory(root) else {
            throw OfflinePkgError.invalidArgument(
                FileSystem.exists(root) ? "the site \(root) is not a folder" : "no site folder at \(root)")
        }
        self.root = root
        var entries = [Entry]()
        try Self.walk(root, relative: "", into: &entries)
        entries.sort { $0.path < $1.path }
        self.entries = entries
    }

    private static func walk(_ path: String, relative: String, into entries: inout [Entry]) throws {
        // Each name is looked up in its open folder (`fstatat`), not by its whole path from `/`: one
        // component per file for the kernel to walk, not a dozen.
        guard let folder = opendir(path) else { return }
        defer { closedir(folder) }
        var names = [[UInt8]]()
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in [UInt8](raw.prefix { $0 != 0 }) }
            if name != [0x2e] && name != [0x2e, 0x2e] { names.append(name) }
        }
        for bytes in names {
            // A name is refused on its bytes before anything is done with it: a `String` would replace
            // bytes that are not UTF-8 and then name (and lstat) another file.
            func shown() -> String { path + "/" + PackagePath(bytes: bytes).description }
            if let reason = ArchivePath.nameProblem(bytes) {
                throw OfflinePkgError.publishRefused(reason: "\(shown()): a device would refuse this path (\(reason))")
            }
            let name = PackagePath(bytes: bytes).string
            let child = path + "/" + name
            let childRelative = relative.isEmpty ? name : relative + "/" + name
            if let reason = ArchivePath.validate(childRelative) {
                throw OfflinePkgError.publishRefused(reason: "\(shown()): a device would refuse this path (\(reason))")
            }
            if name == ArchivePath.deltaControlName {
                throw OfflinePkgError.publishRefused(reason: "\(child): \(name) is a reserved name")
            }
            var info = stat()
            guard fstatat(dirfd(folder), name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw OfflinePkgError.io(path: child, operation: "lstat", Errno.current)
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                entries.append(Entry(path: PackagePath(childRelative), isDirectory: true))
                try walk(child, relative: childRelative, into: &entries)
            case S_IFREG:
                entries.append(Entry(path: PackagePath(childRelative), isDirectory: false, size: Int64(info.st_size)))
            case S_IFLNK:
                throw OfflinePkgError.publishRefused(
                    reason:
                        "\(child) is a symbolic link; a site may hold only regular files and folders (copy the target in its place)"
                )
            default:
                throw OfflinePkgError.publishRefused(
                    reason: "\(child) is not a regular file or folder; a site may hold only those")
            }
        }
    }
}
