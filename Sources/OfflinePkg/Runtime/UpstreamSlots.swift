import FoundationEssentials
import Synchronization

/// The bound on upstream transfers (docs/protocol.md#neighbours-on-the-device): at most `limit` run at once, whatever a page
/// asks for; a request past it waits its turn in a queue of at most `queueLimit`, for at most `wait`,
/// and otherwise gets a 503. Each transfer runs on a thread of its own (`CurlTransport`), so this is
/// also the bound on those threads and on the upstream connections.
final class UpstreamSlots: Sendable {
    let limit: Int
    let queueLimit: Int
    let wait: Duration

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var running = 0
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    init(limit: Int, queueLimit: Int = 256, wait: Duration = .seconds(30)) {
        self.limit = max(1, limit)
        self.queueLimit = queueLimit
        self.wait = wait
    }

    /// Transfers running now (tests, diagnostics).
    var running: Int { state.withLock { $0.running } }

    /// A slot, now or when one frees up (first come, first served); false when the queue is full or
    /// the wait ran out. A true must be paired with one `release()`.
    func acquire() async -> Bool {
        enum Outcome {
            case granted, full
            case queued(UInt64)
        }
        let now = state.withLock { state -> Bool in
            guard state.running < limit && state.waiters.isEmpty else { return false }
            state.running += 1
            return true
        }
        if now { return true }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let outcome = state.withLock { state -> Outcome in
                // A slot may have freed up since the look above.
                if state.running < limit && state.waiters.isEmpty {
                    state.running += 1
                    return .granted
                }
                guard state.waiters.count < queueLimit else { return .full }
                state.nextID += 1
                state.waiters.append(Waiter(id: state.nextID, continuation: continuation))
                return .queued(state.nextID)
            }
            switch outcome {
            case .granted: continuation.resume(returning: true)
            case .full: continuation.resume(returning: false)
            case .queued(let id):
                let wait = wait
                Task {
                    try? await Task.sleep(for: wait)
                    let expired = self.state.withLock { state -> Waiter? in
                        guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                        return state.waiters.remove(at: index)
                    }
                    expired?.continuation.resume(returning: false)
                }
            }
        }
    }

    /// Gives a slot back: to the first waiter, if any.
    func release() {
        let next = state.withLock { state -> Waiter? in
            if state.waiters.isEmpty {
                state.running -= 1
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.continuation.resume(returning: true)
    }
}
