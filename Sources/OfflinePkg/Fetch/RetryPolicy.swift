import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// Retries with exponential backoff for connection errors, timeouts, stalls, slow patches and 408/429/5xx answers,
/// honouring a server's `Retry-After` (capped, so a hostile server cannot park a sync for days).
public struct RetryPolicy: Sendable, Equatable {
    public var attempts: Int
    public var baseDelay: TimeInterval
    public var maxDelay: TimeInterval

    public init(attempts: Int = 4, baseDelay: TimeInterval = 0.5, maxDelay: TimeInterval = 30) {
        self.attempts = attempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    package func delay(afterAttempt attempt: Int, retryAfter: TimeInterval?) -> TimeInterval {
        if let retryAfter { return min(retryAfter, maxDelay) }
        let exponential = baseDelay * pow(2, Double(attempt))
        return min(maxDelay, exponential * Double.random(in: 0.75...1.25))
    }

    /// Runs `operation` until it succeeds, fails for good, or runs out of attempts. What another attempt
    /// may cure is `OfflinePkgError.isRetryable`'s decision; the backoff honours the server's `Retry-After`.
    package func run<T>(_ operation: (_ attempt: Int) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await operation(attempt)
            } catch let error as OfflinePkgError where error.isRetryable && attempt + 1 < attempts {
                let wait = delay(afterAttempt: attempt, retryAfter: error.retryAfter)
                attempt += 1
                try await Task.sleep(nanoseconds: UInt64(wait * 1_000_000_000))
            }
        }
    }
}

extension OfflinePkgError {
    /// Whether another attempt may cure it: a transfer failure that says so (`TransferFailure.isRetryable`),
    /// or a stall or slow patch (not a deadline, which spans every attempt; see `SlowRetrieval`). A stall
    /// is retried because a bad link recovers; only a stall on the last attempt is refused.
    package var isRetryable: Bool {
        switch self {
        case .transfer(_, let failure): failure.isRetryable
        case .slowRetrieval(_, let protection): protection.isRetryable
        default: false
        }
    }

    /// The server's `Retry-After` for a refused status, in seconds.
    package var retryAfter: TimeInterval? {
        if case .transfer(_, let failure) = self { return failure.retryAfter }
        return nil
    }
}
