/// The one-sync-at-a-time lock of a cache root: an exclusive `flock` on `root/lock`, released by the
/// kernel when the process dies, so a crashed sync never leaves the root locked. An operation that
/// reuses or changes held content tells `ContentLedger.lockTaken()` once it holds the lock.
package final class RootLock: Sendable {
    private let lock: FileLock

    /// Takes the lock; with `wait` false, throws `.locked` at once when another process holds it.
    package init(layout: CacheLayout, wait: Bool) throws {
        guard let lock = try FileLock(path: layout.lock, wait: wait) else {
            throw OfflinePkgError.locked(root: layout.root)
        }
        self.lock = lock
    }

    /// Takes the lock from async code: a wait for another sync happens on a thread of its own, never on
    /// one of the cooperative pool's few threads.
    package static func acquire(layout: CacheLayout, wait: Bool) async throws -> RootLock {
        wait ? try await runBlocking { try RootLock(layout: layout, wait: true) } : try RootLock(layout: layout, wait: false)
    }
}
