#if canImport(Glibc)
import Glibc
#endif

/// An exclusive `flock` on a file, held while the value lives. The kernel releases it when the process
/// dies, so a crashed holder never leaves the file locked.
package final class FileLock: Sendable {
    private let descriptor: FileDescriptor

    /// Takes the lock on `path` (created with `mode` if missing). With `wait` false, returns nil when
    /// another holder still has it after `FileLock.grace`; with `wait` true, blocks until it is free.
    package init?(path: String, wait: Bool, mode: mode_t = 0o600) throws {
        let fd = try FileDescriptor.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: mode)
        var tries = wait ? 1 : FileLock.graceTries
        while true {
            do {
                _ = try valueOrErrno { flock(fd.rawValue, LOCK_EX | (wait ? 0 : LOCK_NB)) }
                break
            } catch {
                tries -= 1
                if error == .wouldBlock && tries > 0 {
                    OSThread.sleep(seconds: FileLock.graceStep)
                    continue
                }
                fd.close()
                if error == .wouldBlock { return nil }
                throw OfflinePkgError.io(path: path, operation: "flock", error)
            }
        }
        descriptor = fd
    }

    // The lock belongs to the open file, and a process that another thread of the holder's process
    // starts (fork, posix_spawn) holds a copy of every descriptor until its exec closes it: a lock that
    // a sync has just released may stay taken for that moment, far less than any sync holds it. A lock
    // still taken after 10 tries 20 ms apart has a holder.
    private static let graceTries = 10
    private static let graceStep = 0.02

    deinit { descriptor.close() }
}
