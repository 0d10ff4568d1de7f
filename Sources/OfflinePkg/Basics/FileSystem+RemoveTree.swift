#if canImport(Glibc)
import Glibc
#endif

extension FileSystem {
    /// Removes a tree, read-only installed trees included (their folders are made writable first).
    /// A missing `path` is not an error.
    ///
    /// The walk is a loop, not a recursion, and holds one folder descriptor at a time: an archive may
    /// shape a tree some 2,000 folders deep (a 4,095-byte path of one-letter names), which a recursion
    /// per level would overflow the work thread's stack with, and a descriptor per level would exhaust
    /// the process's descriptors with. Every name is resolved below the open folder that holds it,
    /// without following a link, so the walk never leaves the tree; the way back up is `..`, checked
    /// against the device and inode recorded on the way down, so a folder moved during the walk stops
    /// it with an error instead of sending it elsewhere.
    package static func removeTree(_ path: String) throws {
        try removeTree(bytes: Array(path.utf8))
    }

    /// The same by the path's bytes, so that a name that is not UTF-8 goes too.
    private static func removeTree(bytes path: [UInt8]) throws {
        let isFolder = try withCPath(path) { (cPath) throws -> Bool? in
            var info = stat()
            guard lstat(cPath, &info) == 0 else { return nil }
            if (info.st_mode & S_IFMT) == S_IFDIR { return true }
            if unlink(cPath) != 0 {
                throw OfflinePkgError.io(path: PackagePath(bytes: path).description, operation: "unlink", Errno.current)
            }
            return false
        }
        guard isFolder == true else { return }
        let top = try withCPath(path) { (cPath) throws -> FileDescriptor in
            chmod(cPath, 0o700)
            let fd = open(cPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 { throw OfflinePkgError.io(path: PackagePath(bytes: path).description, operation: "open", Errno.current) }
            return FileDescriptor(rawValue: fd)
        }
        var removal = TreeRemoval(top: path, descriptor: top)
        try removal.run()
        try withCPath(path) { cPath in
            if rmdir(cPath) != 0 {
                throw OfflinePkgError.io(path: PackagePath(bytes: path).description, operation: "rmdir", Errno.current)
            }
        }
    }
}

/// The state of one `removeTree` walk: the open folder, and above it, per level, the folder's name,
/// identity and the names it still holds.
private struct TreeRemoval {
    private struct Level {
        let name: [UInt8]
        let device: dev_t
        let inode: ino_t
        var remaining: [[UInt8]]
    }

    private let top: [UInt8]
    private var current: FileDescriptor
    private var levels: [Level] = []

    init(top: [UInt8], descriptor: FileDescriptor) {
        self.top = top
        self.current = descriptor
    }

    /// Empties the top folder and closes its descriptor, whether it succeeded or not.
    mutating func run() throws {
        defer { current.close() }
        do {
            levels.append(try level(named: [], of: current))
            while let last = levels.indices.last {
                if let name = levels[last].remaining.popLast() {
                    try remove(name)
                } else {
                    try ascend()
                }
            }
        } catch let error as Errno {
            throw OfflinePkgError.io(path: shown(), operation: failedOperation, error)
        }
    }

    /// What the last failed call was, for the error.
    private var failedOperation = ""
    /// The name below the current folder that the failed call was on, if any.
    private var failedName: [UInt8]? = nil

    /// Unlinks `name` in the current folder, or descends into it when it is a folder. `unlinkat` on a
    /// folder fails with `EISDIR` on Linux: one call per file, no `stat`.
    private mutating func remove(_ name: [UInt8]) throws {
        failedName = name
        failedOperation = "unlink"
        let descriptor = current.rawValue
        let failure = FileSystem.withCPath(name) { unlinkat(descriptor, $0, 0) == 0 ? 0 : errno }
        if failure == 0 { return }
        guard failure == EISDIR else { throw Errno(failure) }
        failedOperation = "open"
        let child = try FileSystem.withCPath(name) { (cName) throws -> FileDescriptor in
            // An installed folder is 0500: it lists, but its names cannot be unlinked until it is writable.
            let fd = openat(descriptor, cName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 { return FileDescriptor(rawValue: fd) }
            // One this user cannot even read (0000): make it readable by name first, as the walk has
            // always done (the name is a folder: `unlinkat` said so).
            guard errno == EACCES else { throw Errno.current }
            _ = try valueOrErrno { fchmodat(descriptor, cName, 0o700, 0) }
            return FileDescriptor(rawValue: try valueOrErrno { openat(descriptor, cName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) })
        }
        do {
            failedOperation = "chmod"
            try child.setMode(0o700)
            let next = try level(named: name, of: child)
            current.close()
            current = child
            levels.append(next)
            failedName = nil
        } catch {
            child.close()
            throw error
        }
    }

    /// Leaves an emptied folder for its parent, reached as `..` and checked to be the folder the walk
    /// came down from, and removes it there.
    private mutating func ascend() throws {
        let finished = levels.removeLast()
        guard let parent = levels.last else { return }
        failedName = nil
        failedOperation = "open .."
        let up = FileDescriptor(rawValue: try valueOrErrno { openat(current.rawValue, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) })
        current.close()
        current = up
        levels.append(finished)
        let info = try up.status()
        guard info.st_dev == parent.device && info.st_ino == parent.inode else {
            failedOperation = "walk (the folder moved during removal)"
            throw Errno(ESTALE)
        }
        levels.removeLast()
        failedName = finished.name
        failedOperation = "rmdir"
        _ = try FileSystem.withCPath(finished.name) { (cName) throws in
            try valueOrErrno { unlinkat(up.rawValue, cName, AT_REMOVEDIR) }
        }
        failedName = nil
    }

    private func level(named name: [UInt8], of folder: FileDescriptor) throws -> Level {
        let info = try folder.status()
        return Level(name: name, device: info.st_dev, inode: info.st_ino, remaining: try folder.entryNames())
    }

    /// The path of the current folder (and the failed name in it), for an error.
    private func shown() -> String {
        var path = top
        for level in levels.dropFirst() { path += [UInt8(ascii: "/")] + level.name }
        if let name = failedName { path += [UInt8(ascii: "/")] + name }
        return PackagePath(bytes: path).description
    }
}
