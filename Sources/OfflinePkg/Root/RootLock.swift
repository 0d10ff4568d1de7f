/// The one-sync-at-a-time lock of a cache root: an exclusive `flock` on `root/lock`, released by the
/// kernel when the process dies, so a crashed sync never leaves the root locked. An operation that
/// reuses or changes held content tells `ContentLedger.lockTaken()` once it holds the lock.
package final class RootLock: Sendable {
    private let lock: FileLock

    /// Takes the lock; with `wait` false, throws `.locked` at once when another process holds it. With
    /// `wait`, `waiting` is called once before the wait when another process holds it (so a command
    /// can say that it waits).
    package init(layout: CacheLayout, wait: Bool, waiting: (() -> Void)? = nil) throws {
        var taken = try layout.writing { try FileLock(path: layout.lock, wait: false) }
        if taken == nil && wait {
            waiting?()
            taken = try layout.writing { try FileLock(path: layout.lock, wait: true) }
        }
        guard let lock = taken else {
            throw OfflinePkgError.locked(root: layout.root)
        }
        self.lock = lock
    }

    /// Takes the lock from async code: a wait for another sync happens on a thread of its own, never on
    /// one of the cooperative pool's few threads.
    package static func acquire(layout: CacheLayout, wait: Bool, waiting: (@Sendable () -> Void)? = nil) async throws -> RootLock {
        wait
            ? try await runBlocking { try RootLock(layout: layout, wait: true, waiting: waiting) }
            : try RootLock(layout: layout, wait: false)
    }
}
