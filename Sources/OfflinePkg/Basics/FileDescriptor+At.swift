#if canImport(Glibc)
import Glibc
#endif

/// The `*at` calls the archive writer is built on: every name is resolved below an open folder
/// descriptor, one component at a time, never as a path the kernel walks (and could follow a link in).
/// They throw the bare `Errno`: the caller knows which path it meant and names it in its error.
extension FileDescriptor {
    /// Opens the folder `name` (one component) below this folder, refusing to follow a link.
    package func openFolder(_ name: String) throws(Errno) -> FileDescriptor {
        let fd = try valueOrErrno { openat(rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        return FileDescriptor(rawValue: fd)
    }

    /// Opens a folder by path, the last component not followed (the root of an unpack).
    package static func openFolder(path: String) throws(Errno) -> FileDescriptor {
        let fd = try valueOrErrno { Glibc.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        return FileDescriptor(rawValue: fd)
    }

    /// Opens the entry `name` (one component, as the bytes the folder holds) below this folder, whatever
    /// its type, to `fstat` and `fchmod` it: a link is refused (`ELOOP`), never followed, and a FIFO is
    /// not waited on.
    package func openEntry(_ name: [UInt8]) throws(Errno) -> FileDescriptor {
        let fd = try valueOrErrno {
            FileSystem.withCPath(name) { openat(rawValue, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        }
        return FileDescriptor(rawValue: fd)
    }

    /// The names in this open folder, as `FileSystem.entryNames(of:)` gives them. The listing reads a
    /// descriptor of its own (the folder opened again as "."), so this one stays open and unmoved.
    package func entryNames() throws(Errno) -> [[UInt8]] {
        let own = try valueOrErrno { openat(rawValue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard let stream = fdopendir(own) else {
            let error = Errno.current
            Glibc.close(own)
            throw error
        }
        defer { closedir(stream) }
        return FileSystem.entryNames(stream: stream)
    }

    /// The open file's own `stat`: no path, so nothing to follow.
    package func status() throws(Errno) -> stat {
        var info = stat()
        _ = try valueOrErrno { fstat(rawValue, &info) }
        return info
    }

    /// Creates the folder `name` below this folder.
    package func makeFolder(_ name: String, mode: mode_t) throws(Errno) {
        _ = try valueOrErrno { mkdirat(rawValue, name, mode) }
    }

    /// Creates the file `name` below this folder for writing. `O_EXCL` with `O_NOFOLLOW` fails on any
    /// name that already exists, a link included: a new inode or nothing.
    package func createFile(_ name: String, mode: mode_t) throws(Errno) -> FileDescriptor {
        let fd = try valueOrErrno {
            openat(rawValue, name, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, mode)
        }
        return FileDescriptor(rawValue: fd)
    }

    /// Removes the file `name` below this folder (the name only: a hard link's other names stay).
    package func unlink(_ name: String) throws(Errno) {
        _ = try valueOrErrno { unlinkat(rawValue, name, 0) }
    }

    /// Sets the mode of the open file itself: no path, so nothing to follow.
    package func setMode(_ mode: mode_t) throws(Errno) {
        _ = try valueOrErrno { fchmod(rawValue, mode) }
    }

    /// Writes all of `buffer`, looping over short writes, `writeLimit` bytes a call; throws the bare `Errno`.
    package func writeAll(_ buffer: UnsafeRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < buffer.count {
            offset += try valueOrErrno {
                Glibc.write(rawValue, buffer.baseAddress! + offset, min(buffer.count - offset, Self.writeLimit))
            }
        }
    }
}
