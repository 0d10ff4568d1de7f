#if canImport(Glibc)
import Glibc
#endif

/// The one-sync-at-a-time lock of a cache root: an exclusive `flock` on `root/lock`, released by the
/// kernel when the process dies, so a crashed sync never leaves the root locked.
package final class RootLock: Sendable {
    private let descriptor: FileDescriptor

    /// Takes the lock; with `wait` false, throws `.locked` at once when another process holds it.
    package init(layout: CacheLayout, wait: Bool) throws {
        let fd = try FileDescriptor.open(layout.lock, O_RDWR | O_CREAT, mode: 0o644)
        let operation = LOCK_EX | (wait ? 0 : LOCK_NB)
        do {
            _ = try valueOrErrno { flock(fd.rawValue, operation) }
        } catch {
            fd.close()
            if error == .wouldBlock { throw OfflinePkgError.locked(root: layout.root) }
            throw OfflinePkgError.io(path: layout.lock, operation: "flock", error)
        }
        descriptor = fd
    }

    deinit { descriptor.close() }

    /// Takes the lock from async code: a wait for another sync happens on a thread of its own, never on
    /// one of the cooperative pool's few threads.
    package static func acquire(layout: CacheLayout, wait: Bool) async throws -> RootLock {
        wait ? try await runBlocking { try RootLock(layout: layout, wait: true) } : try RootLock(layout: layout, wait: false)
    }
}
