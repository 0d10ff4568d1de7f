import Foundation

/// Retries with exponential backoff for connection errors, timeouts, stalls, slow patches and 5xx/429 answers,
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

    /// Runs `operation` until it succeeds, fails for good, or runs out of attempts.
    package func run<T>(_ operation: (_ attempt: Int) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await operation(attempt)
            } catch let failure as RetryableFailure where attempt + 1 < attempts {
                let wait = delay(afterAttempt: attempt, retryAfter: failure.retryAfter)
                attempt += 1
                try await Task.sleep(nanoseconds: UInt64(wait * 1_000_000_000))
            } catch let failure as RetryableFailure {
                throw failure.error
            }
        }
    }
}

/// Wraps an error that another attempt may cure, with the server's `Retry-After` if it sent one.
package struct RetryableFailure: Error {
    package var error: OfflinePkgError
    package var retryAfter: TimeInterval?

    /// Sorts an error thrown by one attempt: retryable ones (a stall among them: a bad link recovers, and
    /// only a stall on the last attempt is refused) are wrapped, the rest pass through.
    package static func classify(_ error: Error) -> Error {
        switch error as? OfflinePkgError {
        case let failure? where failure.isRetryable: RetryableFailure(error: failure, retryAfter: nil)
        default: error
        }
    }

    /// The error for an HTTP status that is not success; 408, 429 and 5xx are worth another try, and
    /// 404 and 410 are `.notFound` (a missing signature is not a failure; a caller decides by the case).
    package static func status(_ head: TransferResponseHead, url: String) -> Error {
        let reason = "HTTP status \(head.status)"
        if head.status == 404 || head.status == 410 { return OfflinePkgError.notFound(url: url, reason: reason) }
        let error = OfflinePkgError.transfer(url: url, reason: reason, retryable: false)
        if head.status == 408 || head.status == 429 || head.status >= 500 {
            return RetryableFailure(error: error, retryAfter: head.retryAfter)
        }
        return error
    }
}

extension OfflinePkgError {
    /// Whether another attempt may cure it: a transfer marked so, or a stall or slow patch (not a
    /// deadline, which spans every attempt).
    package var isRetryable: Bool {
        switch self {
        case .transfer(_, _, let retryable): retryable
        case .slowRetrieval(_, let protection): protection.isRetryable
        default: false
        }
    }
}
