import Foundation
import Synchronization
import Testing

@testable import OfflinePkg

/// What is retried, and what counts as "no such file", is decided from `TransferFailure`, never from a
/// message: a failure whose text reads like a retryable one is still not retried.
@Suite struct TransferFailureTests {
    @Test(
        arguments: [
            (500, true), (503, true), (599, true), (408, true), (429, true),
            (400, false), (401, false), (403, false), (416, false), (301, false),
        ] as [(Int, Bool)])
    func statusRetryability(status: Int, retryable: Bool) {
        let failure = TransferResponseHead(status: status, headers: [:]).failure
        #expect(failure == .status(status))
        #expect(failure.isRetryable == retryable)
        #expect(failure.description == "HTTP status \(status)")
    }

    @Test(arguments: [404, 410])
    func missingFilesAreNotFound(status: Int) {
        let failure = TransferResponseHead(status: status, headers: [:]).failure
        #expect(failure == .notFound(status: status))
        #expect(!failure.isRetryable)
    }

    @Test func retryAfterIsCarriedByTheStatus() {
        let failure = TransferResponseHead(status: 503, headers: ["retry-after": "7"]).failure
        #expect(failure == .status(503, retryAfter: 7))
        #expect(OfflinePkgError.transfer(url: "u", failure: failure).retryAfter == 7)
    }

    @Test(
        arguments: [
            (TransferFailure.connection(detail: "x"), true), (.timedOut(detail: "x"), true), (.tlsHandshake(detail: "x"), true),
            (.rangeNotSatisfiable, true), (.truncated(received: 1, expected: 2), true),
            (.certificateRefused(detail: "x"), false), (.disallowedRedirect(location: nil), false), (.cancelled, false),
            (.invalidURL, false), (.notFound(status: nil), false), (.other(detail: "x"), false),
        ] as [(TransferFailure, Bool)])
    func kindRetryability(failure: TransferFailure, retryable: Bool) {
        #expect(failure.isRetryable == retryable)
    }

    @Test func slowRetrievalRetryabilityComesFromTheProtection() {
        #expect(OfflinePkgError.slowRetrieval(url: "u", protection: .stalled(seconds: 1)).isRetryable)
        #expect(!OfflinePkgError.slowRetrieval(url: "u", protection: .deadline(what: "manifest", seconds: 1)).isRetryable)
        #expect(!OfflinePkgError.hashMismatch(what: "a", expected: "b", actual: "c").isRetryable)
    }

    /// The retry loop asks the case: a `.other` failure that reads exactly like a 503 is tried once, a
    /// real 503 as often as the policy allows.
    @Test func rewordingAMessageCannotChangeRetrying() async {
        let policy = RetryPolicy(attempts: 3, baseDelay: 0.001, maxDelay: 0.001)
        func attempts(_ failure: TransferFailure) async -> Int {
            let count = Mutex(0)
            _ = try? await policy.run { _ -> Int in
                count.withLock { $0 += 1 }
                throw OfflinePkgError.transfer(url: "https://example.com/x", failure: failure)
            }
            return count.withLock { $0 }
        }
        let lookalike = TransferFailure.other(detail: "HTTP status 503")
        #expect(lookalike.description == TransferFailure.status(503).description)
        #expect(await attempts(lookalike) == 1)
        #expect(await attempts(.status(503)) == 3)
        #expect(await attempts(.notFound(status: 404)) == 1)
    }

    /// "No signature" is the case `.notFound`, whatever its text: a fetch answered so gives nil, and any
    /// other failure, even one whose message says "HTTP status 404", is thrown.
    @Test func noSignatureIsDecidedByTheCase() async throws {
        let url = URL(string: "https://example.com/manifest.json")!
        func fetcher(_ failure: TransferFailure) -> ManifestFetcher {
            ManifestFetcher(
                transport: FailingTransport(failure: failure), retry: RetryPolicy(attempts: 1), limits: .init(), deadline: 10)
        }
        #expect(try await fetcher(.notFound(status: 410)).fetchSignature(url) == nil)
        #expect(try await fetcher(.notFound(status: nil)).fetchSignature(url) == nil)
        await #expect(throws: OfflinePkgError.self) {
            try await fetcher(.other(detail: "HTTP status 404")).fetchSignature(url)
        }
    }
}

/// A transport whose every request fails with one `TransferFailure`.
private struct FailingTransport: Transport {
    var failure: TransferFailure

    func get(
        _ request: TransferRequest, onResponse: @escaping @Sendable (TransferResponseHead) throws -> Void,
        onBody: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws -> TransferResponseHead {
        throw OfflinePkgError.transfer(url: request.url.absoluteString, failure: failure)
    }
}
