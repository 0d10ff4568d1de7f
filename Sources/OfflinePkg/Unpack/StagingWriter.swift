#if canImport(Glibc)
import Glibc
#endif

/// Creates the folders and files of an unpacked tree under a staging folder through directory
/// descriptors, one path component at a time. Every folder is opened from its parent's descriptor with
/// `O_DIRECTORY | O_NOFOLLOW`, every file created with `O_CREAT | O_EXCL | O_NOFOLLOW`, and no name
/// holding `/`, `.` or `..` is ever passed to the kernel: whatever a path says, nothing here follows a
/// symbolic link or reaches outside the staging folder. That is the protection libarchive's
/// `ARCHIVE_EXTRACT_SECURE_SYMLINKS | _NODOTDOT` gave behind `ArchiveUnpacker`'s own checks, kept at one
/// `openat` per file: libarchive re-checks every component of the absolute path with an `lstat`, an
/// `open` and a `close` for each file it writes.
package final class StagingWriter {
    private let root: String
    private let rootFD: FileDescriptor
    /// A delta writes over hard links to the old tree: those are unlinked first, never written through.
    private let replacesFiles: Bool
    /// The folder the last file went into, as its components and their open descriptors (the root's
    /// excluded): archives list a folder's files together, so most files reuse it, and at most one
    /// descriptor per level of depth is open.
    private var components: [Substring] = []
    private var descriptors: [FileDescriptor] = []
    /// Every folder opened or created under the root (relative paths).
    package private(set) var folders: Set<String> = []

    /// `root` must be an existing folder that only this process writes (a staging folder).
    package init(root: String, replacesFiles: Bool) throws {
        self.root = root
        self.replacesFiles = replacesFiles
        rootFD = try FileDescriptor.open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    }

    deinit {
        for descriptor in descriptors { descriptor.close() }
        rootFD.close()
    }

    /// Makes sure the folder at `path` (relative, `/`-separated, "" for the root) exists.
    package func makeFolder(_ path: Substring) throws {
        let wanted = path.isEmpty ? [] : path.split(separator: "/", omittingEmptySubsequences: false)
        var common = 0
        while common < components.count, common < wanted.count, components[common] == wanted[common] { common += 1 }
        while descriptors.count > common {
            descriptors.removeLast().close()
            components.removeLast()
        }
        for name in wanted[common...] {
            try Self.checkName(name, in: path)
            let parent = descriptors.last ?? rootFD
            let display = root + "/" + path
            do {
                // mkdirat first: a fresh staging folder has none of them, so that is one call, not two.
                if mkdirat(parent.rawValue, String(name), 0o755) != 0, errno != EEXIST { throw Errno.current }
                let fd = try valueOrErrno { openat(parent.rawValue, String(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                descriptors.append(FileDescriptor(rawValue: fd))
            } catch let error as Errno {
                // ELOOP or ENOTDIR: the name is a symbolic link or a file, not a folder.
                throw OfflinePkgError.io(path: display, operation: "mkdir", error)
            }
            components.append(name)
            folders.insert(components.joined(separator: "/"))
        }
    }

    /// Creates the file at `path` (relative, `/`-separated) read-only (0444), its folder if needed, and
    /// returns a descriptor open for writing; the caller closes it.
    package func createFile(_ path: String) throws -> FileDescriptor {
        let slash = path.lastIndex(of: "/")
        try makeFolder(slash.map { path[..<$0] } ?? "")
        let name = slash.map { path[path.index(after: $0)...] } ?? path[...]
        try Self.checkName(name, in: path[...])
        let parent = descriptors.last ?? rootFD
        if replacesFiles { unlinkat(parent.rawValue, String(name), 0) }
        do {
            let fd = try valueOrErrno {
                openat(parent.rawValue, String(name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o444)
            }
            return FileDescriptor(rawValue: fd)
        } catch {
            throw OfflinePkgError.io(path: root + "/" + path, operation: "create", error)
        }
    }

    /// The second line of defence: `ArchivePath.normalize` already refused these.
    private static func checkName(_ name: Substring, in path: Substring) throws {
        if name.isEmpty || name == "." || name == ".." || name.contains("/") || name.utf8.contains(0) {
            throw OfflinePkgError.io(path: String(path), operation: "create", Errno(EINVAL))
        }
    }
}
