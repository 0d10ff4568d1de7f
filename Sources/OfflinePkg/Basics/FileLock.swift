#if canImport(Glibc)
import Glibc
#endif

/// An exclusive `flock` on a file, held while the value lives. The kernel releases it when the process
/// dies, so a crashed holder never leaves the file locked.
package final class FileLock: Sendable {
    private let descriptor: FileDescriptor

    /// Takes the lock on `path` (created with `mode` if missing). With `wait` false, returns nil at once
    /// when another holder has it; with `wait` true, blocks until it is free.
    package init?(path: String, wait: Bool, mode: mode_t = 0o600) throws {
        let fd = try FileDescriptor.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: mode)
        do {
            _ = try valueOrErrno { flock(fd.rawValue, LOCK_EX | (wait ? 0 : LOCK_NB)) }
        } catch {
            fd.close()
            if error == .wouldBlock { return nil }
            throw OfflinePkgError.io(path: path, operation: "flock", error)
        }
        descriptor = fd
    }

    // The lock belongs to the open file, not to this descriptor: a process that another thread
    // starts (fork, posix_spawn) holds a copy of every descriptor until its exec closes it, and a close
    // alone would leave the lock taken by that copy. Unlocking first releases it whoever holds copies.
    deinit {
        flock(descriptor.rawValue, LOCK_UN)
        descriptor.close()
    }
}
