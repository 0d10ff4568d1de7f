import Foundation
import Synchronization
import Testing

@testable import OfflinePkg

/// `ThreadCondition`'s timed wait takes whatever timeout a host hands down: no timeout (`.infinity`), a
/// negative one or NaN neither traps nor waits past a signal.
@Suite struct ThreadConditionTests {
    @Test func anInfiniteWaitEndsAtTheSignal() {
        let condition = ThreadCondition()
        let signalled = Mutex(false)
        _ = OSThread.start {
            OSThread.sleep(seconds: 0.05)
            condition.lock()
            signalled.withLock { $0 = true }
            condition.signal()
            condition.unlock()
        }
        condition.lock()
        while !signalled.withLock({ $0 }) { condition.wait(seconds: .infinity) }
        condition.unlock()
        #expect(signalled.withLock { $0 })
    }

    @Test func aNegativeOrNaNWaitEndsAtOnce() {
        let condition = ThreadCondition()
        condition.lock()
        #expect(!condition.wait(seconds: -1))
        #expect(!condition.wait(seconds: .nan))
        condition.unlock()
    }
}
