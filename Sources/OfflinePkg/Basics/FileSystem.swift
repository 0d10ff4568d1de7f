internal import CSystemShims

#if canImport(Glibc)
import Glibc
#endif

/// The few file-system operations the store needs, each a thin wrapper over POSIX calls.
/// Paths come from `CacheLayout`; nothing here builds paths of its own except to walk a tree.
package enum FileSystem {
    package static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    package static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    package static func fileSize(_ path: String) -> Int64? {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(info.st_size)
    }

    /// Creates `path` and any missing parents, private to this user by default: everything a cache root
    /// holds is (docs/protocol.md#neighbours-on-the-device). The publisher passes 0755 for a repository that a web server serves.
    package static func makeDirectories(_ path: String, mode: mode_t = 0o700) throws {
        if isDirectory(path) { return }
        let parent = parentPath(path)
        if parent != path && !parent.isEmpty { try makeDirectories(parent, mode: mode) }
        if mkdir(path, mode) != 0 && errno != EEXIST {
            throw OfflinePkgError.io(path: path, operation: "mkdir", Errno.current)
        }
    }

    package static func parentPath(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Reads a whole small file, refusing one larger than `limit` bytes.
    package static func read(_ path: String, limit: Int = 16 << 20) throws -> [UInt8] {
        let fd = try FileDescriptor.open(path, O_RDONLY)
        return try fd.closeAfter { (fd) throws -> [UInt8] in
            var result = [UInt8]()
            // Read into uninitialized storage: a zeroed 64 KiB chunk cost each read of one of the root's
            // small files a 64 KiB memset (0.33 M instructions of a no-op sync's five reads). The first
            // read is smaller; most files end in it.
            var size = 16 << 10
            while true {
                let chunk = try [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
                    count = try fd.read(into: UnsafeMutableRawBufferPointer(buffer), path: path)
                }
                size = 64 << 10
                if chunk.isEmpty { return result }
                if result.isEmpty { result = chunk } else { result += chunk }
                if result.count > limit {
                    throw OfflinePkgError.sizeMismatch(what: path, reason: "larger than the limit of \(limit) bytes")
                }
            }
        }
    }

    /// Creates `path` (it must not exist) holding `bytes`, without a flush: for files in staging, which a
    /// later `syncFileSystem` makes durable before anything relies on them.
    package static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws {
        let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode)
        try fd.closeAfter { (fd) throws in try fd.writeAll(bytes, path: path) }
    }

    /// Writes `bytes` so that readers see either the old file or the whole new one, even across a power
    /// loss: write a temporary sibling, fsync it, rename it over `path`, fsync the folder. `durable: false`
    /// leaves out both flushes, for a hint that a power loss may take (readers still never see half a
    /// file, the rename is atomic, but after a crash the file may be the old one, or empty).
    ///
    /// The temporary's name is predictable (the writer's pid), so it is created new, `O_EXCL |
    /// O_NOFOLLOW` (docs/protocol.md#neighbours-on-the-device): whatever is at that name — one a killed writer of the same pid left, or a
    /// symlink someone planted to make this write another file — is unlinked, never written through.
    package static func writeAtomically(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600, durable: Bool = true) throws {
        let temporary = path + temporarySuffix + String(getpid())
        let fd = try createNew(temporary, mode: mode)
        do {
            try fd.closeAfter { (fd) throws in
                try fd.writeAll(bytes, path: temporary)
                if durable { try fd.sync(path: temporary) }
            }
            try rename(temporary, to: path)
        } catch {
            unlink(temporary)
            throw error
        }
        if durable { try syncDirectory(parentPath(path)) }
    }

    /// Creates `path` for writing, new (`O_EXCL | O_NOFOLLOW`): a name already there (a file, a link) is
    /// unlinked first, once.
    package static func createNew(_ path: String, mode: mode_t) throws -> FileDescriptor {
        let flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW
        if let fd = try? FileDescriptor.open(path, flags, mode: mode) { return fd }
        unlink(path)
        return try FileDescriptor.open(path, flags, mode: mode)
    }

    /// `writeAtomically` writes `<path>.tmp-<pid>`: a kill between its open and its rename leaves one.
    private static let temporarySuffix = ".tmp-"

    /// The process that was writing `name` if it is a `writeAtomically` temporary (`x.tmp-1234`), else nil.
    /// Compares bytes: every sync asks it of every name in the root's folders, and `ranges(of:)` on
    /// `String` costs its first use a good part of a no-op sync.
    package static func atomicWriter(ofTemporary name: String) -> pid_t? {
        let bytes = Array(name.utf8), suffix = Array(temporarySuffix.utf8)
        guard bytes.count > suffix.count else { return nil }
        var start = bytes.count - suffix.count
        while start > 0 && !bytes[start..<start + suffix.count].elementsEqual(suffix) { start -= 1 }
        let digits = bytes[(start + suffix.count)...]
        guard start > 0, let pid = pid_t(String(decoding: digits, as: UTF8.self)), pid > 0,
            String(pid).utf8.elementsEqual(digits)
        else { return nil }
        return pid
    }

    /// Whether a process with this id exists (EPERM: it does, under another user).
    package static func processIsAlive(_ pid: pid_t) -> Bool {
        kill(pid, 0) == 0 || errno == EPERM
    }

    package static func rename(_ source: String, to destination: String) throws {
        if Glibc.rename(source, destination) != 0 {
            throw OfflinePkgError.io(path: "\(source) -> \(destination)", operation: "rename", Errno.current)
        }
    }

    /// Renames `source` unless `destination` exists, in one step: 0, else the errno (EEXIST; EINVAL
    /// where the file system has no `RENAME_NOREPLACE`).
    package static func renameWithoutReplacing(_ source: String, to destination: String) -> Int32 {
        csystemshims_rename_noreplace(source, destination) == 0 ? 0 : errno
    }

    /// Swaps two paths in one atomic step (both must exist).
    package static func exchange(_ first: String, _ second: String) throws {
        if csystemshims_exchange(first, second) != 0 {
            throw OfflinePkgError.io(path: "\(first) <-> \(second)", operation: "renameat2(RENAME_EXCHANGE)", Errno.current)
        }
    }

    package static func syncDirectory(_ path: String) throws {
        let fd = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
        try fd.closeAfter { (fd) throws in try fd.sync(path: path) }
    }

    /// Flushes the whole file system holding `path` in one call: far cheaper than one fsync per file
    /// of a freshly unpacked tree, and as safe, since the switch that follows is itself fsynced.
    package static func syncFileSystem(containing path: String) throws {
        let fd = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
        try fd.closeAfter { (fd) throws in
            if csystemshims_syncfs(fd.rawValue) != 0 { throw OfflinePkgError.io(path: path, operation: "syncfs", Errno.current) }
        }
    }

    /// Cleanup: unlinks `path` if it can and ignores every failure, a missing file included.
    package static func discardFile(_ path: String) {
        unlink(path)
    }

    /// Removes a file, failing if it is not there or cannot be removed (unlike `discardFile`, cleanup).
    package static func removeFile(_ path: String) throws {
        do { _ = try valueOrErrno { unlink(path) } } catch { throw OfflinePkgError.io(path: path, operation: "unlink", error) }
    }

    /// Makes `path` a second name of the file at `source`.
    package static func hardLink(_ source: String, to path: String) throws {
        do { _ = try valueOrErrno { link(source, path) } } catch {
            throw OfflinePkgError.io(path: "\(source) -> \(path)", operation: "link", error)
        }
    }

    /// Names in a directory as text, without `.` and `..`; empty when it does not exist. A name that is
    /// not valid UTF-8 is left out (a `String` would replace its bytes and name another file): callers
    /// list folders offlinepkg named itself. `entryNames(of:)` gives every name as bytes.
    package static func contents(of path: String) -> [String] {
        entryNames(of: path).compactMap { String(validating: $0, as: UTF8.self) }
    }

    /// Names in a directory as the bytes `readdir` gives them, without `.` and `..`.
    package static func entryNames(of path: String) -> [[UInt8]] {
        path.withCString { entryNames(cPath: $0) }
    }

    package static func entryNames(ofBytes path: [UInt8]) -> [[UInt8]] {
        withCPath(path) { entryNames(cPath: $0) }
    }

    /// Calls `body` with `path` as a C string, byte for byte (a `String` could not hold every name).
    package static func withCPath<R>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try (path + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }

    fileprivate static func entryNames(cPath path: UnsafePointer<CChar>) -> [[UInt8]] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        return entryNames(stream: dir)
    }

    /// The names an open folder stream gives, without `.` and `..`.
    package static func entryNames(stream dir: OpaquePointer) -> [[UInt8]] {
        var names = [[UInt8]]()
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                [UInt8](raw.prefix { $0 != 0 })
            }
            if name != [0x2e] && name != [0x2e, 0x2e] { names.append(name) }
        }
        return names
    }

    /// Makes the folders under `root` named in `folders` (relative paths) read-only, 0500, but not `root`
    /// itself: Linux lets a process move a folder to another parent only with write permission on that
    /// folder (its `..` changes), so a tree's top folder stays writable until it is in place (`seal`).
    /// The files need nothing: the unpacker creates them 0400, so a finished tree is read-only without a walk.
    /// Read-only, and this user's alone, like everything in a cache root (docs/protocol.md#neighbours-on-the-device).
    ///
    /// Each folder is named relative to a descriptor of `root`, never by `root + path`: the archive rules
    /// bound a path inside the tree (4,095 bytes), not the root's own path before it, so a full path
    /// could pass PATH_MAX on a device whose root is long (`ENAMETOOLONG`).
    package static func makeFoldersReadOnly(_ folders: some Sequence<PackagePath>, under root: String) throws {
        let top: FileDescriptor
        do { top = try FileDescriptor.openFolder(path: root) } catch {
            throw OfflinePkgError.io(path: root, operation: "open", error)
        }
        try top.closeAfter { (top) throws in
            for folder in folders {
                let failure = withCPath(folder.bytes) { fchmodat(top.rawValue, $0, 0o500, 0) == 0 ? 0 : errno }
                if failure != 0 {
                    throw OfflinePkgError.io(path: root + "/" + folder.description, operation: "chmod", Errno(failure))
                }
            }
        }
    }

    /// Makes an installed tree's top folder read-only (0500), the last step of installing it; a no-op
    /// when it already is, so a clean-up stage can re-seal a tree that a crash left between its rename
    /// and this call.
    package static func seal(_ tree: String) throws {
        try setFolderMode(tree, 0o500)
    }

    /// Makes a tree's top folder writable (0700) again, so it can be moved (`exchange`) to another parent.
    package static func unseal(_ tree: String) throws {
        try setFolderMode(tree, 0o700)
    }

    private static func setFolderMode(_ path: String, _ mode: mode_t) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw OfflinePkgError.io(path: path, operation: "lstat", Errno.current) }
        guard (info.st_mode & S_IFMT) == S_IFDIR, info.st_mode & 0o7777 != mode else { return }
        if chmod(path, mode) != 0 { throw OfflinePkgError.io(path: path, operation: "chmod", Errno.current) }
    }

    /// Bytes available to an unprivileged writer on the file system holding `path`.
    package static func availableSpace(at path: String) throws -> Int64 {
        var info = statvfs()
        if statvfs(path, &info) != 0 { throw OfflinePkgError.io(path: path, operation: "statvfs", Errno.current) }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    package static func realPath(_ path: String) throws -> String {
        guard let resolved = realpath(path, nil) else {
            throw OfflinePkgError.io(path: path, operation: "realpath", Errno.current)
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
