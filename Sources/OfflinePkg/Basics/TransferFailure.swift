/// Why a transfer failed, decided once where it is known: the status check of a response
/// (`init(status:)`), libcurl's result code (`CurlTransfer.error(for:)`), or the downloader's own checks.
/// Whether another attempt may cure it (`isRetryable`) and the message are both made from this value;
/// nothing parses a message, so rewording one cannot change what a sync does.
///
/// The slow-retrieval protections have their own value (`SlowRetrieval`, `OfflinePkgError.slowRetrieval`)
/// and sizes past a limit are `OfflinePkgError.sizeMismatch`: both are refusals (exit 4), not failures.
public enum TransferFailure: Sendable, Equatable, CustomStringConvertible {
    /// The server answered with a status that is not success (and not 404 or 410); `retryAfter` is its
    /// `Retry-After`, in seconds, when it sent one.
    case status(Int, retryAfter: Double? = nil)
    /// The server has no such file: HTTP 404 or 410 (`status`), or a `file:` URL naming nothing (nil).
    case notFound(status: Int?)
    /// The connection could not be made or broke off (refused, unresolved host, reset, nothing received,
    /// a partial transfer, an HTTP/2 stream error); `detail` is libcurl's text.
    case connection(detail: String)
    /// libcurl's own timeout (the connect timeout) ran out.
    case timedOut(detail: String)
    /// The TLS handshake failed (`CURLE_SSL_CONNECT_ERROR`): a bad link may recover.
    case tlsHandshake(detail: String)
    /// The server's certificate did not verify against the trusted authorities: no retry changes that.
    case certificateRefused(detail: String)
    /// A redirect to a scheme the transfer may not follow: https never goes to http. `location` is the
    /// refused target when it is known.
    case disallowedRedirect(location: String?)
    /// A 416 to a resume: the bytes on disk no longer fit the file on the server; the next attempt
    /// starts over.
    case rangeNotSatisfiable
    /// The body ended before the size the manifest promised.
    case truncated(received: Int64, expected: Int64)
    /// The transfer was cancelled (the sync's task was).
    case cancelled
    /// A URL the transport cannot use.
    case invalidURL
    /// The host turned out to be a loopback, link-local, private or unique-local address, which the
    /// runtime cache does not reach unless the device allows it (docs/protocol.md#neighbours-on-the-device); `address` is the one refused.
    case privateAddress(String)
    /// Anything else libcurl reported (including "could not start"); `detail` says what.
    case other(detail: String)

    /// The failure for an HTTP status that is not success: 404 and 410 are `.notFound` (a missing
    /// signature is not a failure; a caller decides by the case), every other one `.status`.
    package init(status: Int, retryAfter: Double?) {
        self = status == 404 || status == 410 ? .notFound(status: status) : .status(status, retryAfter: retryAfter)
    }

    /// Whether another attempt may cure it: connection trouble, timeouts, a failed handshake, a cut-off
    /// body, a range to start over, and the statuses 408, 429 and 5xx. This is the only place that decides.
    package var isRetryable: Bool {
        switch self {
        case .status(let code, _): code == 408 || code == 429 || code >= 500
        case .connection, .timedOut, .tlsHandshake, .rangeNotSatisfiable, .truncated: true
        case .notFound, .certificateRefused, .disallowedRedirect, .cancelled, .invalidURL, .privateAddress, .other: false
        }
    }

    /// The server's `Retry-After`, for the backoff.
    package var retryAfter: Double? {
        if case .status(_, let retryAfter) = self { return retryAfter }
        return nil
    }

    public var description: String {
        switch self {
        case .status(let code, _): "HTTP status \(code)"
        case .notFound(let status?): "HTTP status \(status)"
        case .notFound(nil): "no such file"
        case .connection(let detail), .tlsHandshake(let detail), .certificateRefused(let detail), .other(let detail):
            detail
        case .timedOut(let detail): "timed out (\(detail))"
        case .disallowedRedirect(let location?): "redirect to a disallowed scheme (https never goes to http): \(location)"
        case .disallowedRedirect(nil): "redirect to a disallowed scheme (https never goes to http)"
        case .rangeNotSatisfiable: "range not satisfiable"
        case .truncated(let received, let expected): "body ended after \(received) of \(expected) bytes"
        case .cancelled: "cancelled"
        case .invalidURL: "not a URL"
        case .privateAddress(let address):
            "the host is at \(address), a loopback, link-local or private address (serve --allow-private-upstream reaches it)"
        }
    }
}
