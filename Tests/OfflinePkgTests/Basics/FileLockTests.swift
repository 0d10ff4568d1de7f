import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// The root's lock (`FileLock`) without waiting: another holder makes it nil, a copy of the
/// descriptor that a starting process holds for a moment does not.
@Suite struct FileLockTests {
    @Test func aLockReleasedAMomentLaterIsTaken() throws {
        let scratch = try TemporaryDirectory()
        let path = scratch.path("lock")
        // Another open of the file holds the lock, as a child's copy of a sync's descriptor does
        // between its start and its exec, and lets it go 30 ms later.
        let other = open(path, O_RDWR | O_CREAT, 0o600)
        #expect(other >= 0 && flock(other, LOCK_EX | LOCK_NB) == 0)
        let released = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            usleep(30_000)
            close(other)
            released.signal()
        }
        let lock = try FileLock(path: path, wait: false)
        released.wait()
        #expect(lock != nil, "a lock released after 30 ms was reported as held")
    }

    @Test func aLockThatStaysHeldIsNil() throws {
        let scratch = try TemporaryDirectory()
        let path = scratch.path("lock")
        let other = open(path, O_RDWR | O_CREAT, 0o600)
        defer { close(other) }
        #expect(other >= 0 && flock(other, LOCK_EX | LOCK_NB) == 0)
        let started = ContinuousClock.now
        #expect(try FileLock(path: path, wait: false) == nil)
        #expect(ContinuousClock.now - started < .seconds(2))
    }
}
