import FoundationEssentials

/// Moves bytes from a URL to the caller. The engine sees only this protocol, so tests can put their own
/// transport in (it is `package`: a host app always gets `CurlTransport`, for http, https and file URLs).
package protocol Transport: Sendable {
    /// Performs one GET. Response headers reach `onResponse` before the first body byte, with the
    /// status; `onBody` gets the body in chunks. Either callback aborts the transfer by throwing, and
    /// the transfer then fails with that error.
    func get(
        _ request: TransferRequest, onResponse: @escaping @Sendable (TransferResponseHead) throws -> Void,
        onBody: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws -> TransferResponseHead
}

/// The slow-retrieval protections of a transfer (docs/security.md). A stall clock alone cannot stop a
/// server that sends one byte just before it fires; the rate floor does, and the deadline bounds the
/// small files (manifest, signature) whose whole transfer must be quick.
package struct RetrievalLimits: Sendable, Equatable {
    /// Abort when no byte arrives for this long.
    package var stallTimeout: TimeInterval
    /// Abort when fewer than this many bytes a second arrive on average over a window of
    /// `minimumRateWindow` seconds; 0 turns the floor off.
    package var minimumRate: Int64
    package var minimumRateWindow: TimeInterval
    /// The fixed part of the time one range request of a file-level update may take in all (see
    /// `RangeFetcher.timeLimit`).
    package var rangeRequestDeadline: TimeInterval = 120

    package init(stallTimeout: TimeInterval = 30, minimumRate: Int64 = 1024, minimumRateWindow: TimeInterval = 30) {
        self.stallTimeout = stallTimeout
        self.minimumRate = minimumRate
        self.minimumRateWindow = minimumRateWindow
    }
}

/// When a whole fetch must be done, every attempt included: `what` and `seconds` name it in the error.
package struct TransferDeadline: Sendable {
    package var what: String
    package var seconds: TimeInterval
    package var end: ContinuousClock.Instant

    package init(what: String, seconds: TimeInterval, from start: ContinuousClock.Instant = .now) {
        self.what = what
        self.seconds = seconds
        end = start + .milliseconds(Int64(seconds * 1000))
    }

    package var hasPassed: Bool { ContinuousClock.now >= end }
    package var protection: SlowRetrieval { .deadline(what: what, seconds: seconds) }
}

/// One GET: the URL, extra request headers, and timeouts.
package struct TransferRequest: Sendable {
    package var url: URL
    package var headers: [(String, String)]
    package var limits: RetrievalLimits
    package var deadline: TransferDeadline?
    package var connectTimeout: TimeInterval
    /// A PEM file of certificate authorities to trust instead of the system's (a fleet's private CA).
    package var caBundle: String?
    /// The method: GET unless the runtime cache passes another one through (docs/protocol.md#the-runtime-cache).
    package var method = "GET"
    /// The request body, pulled as libcurl sends it: fills the buffer and returns the byte count, 0 at
    /// the end. It may block (it runs on the transfer's own thread). Nil: no body.
    package var body: (@Sendable (UnsafeMutableRawBufferPointer) -> Int)?
    /// The body's length when known (a `Content-Length` the client sent); nil sends it chunked.
    package var bodyLength: Int64?
    /// `HOST:PORT:ADDRESS` pins, as curl's `--resolve` (libcurl's `CURLOPT_RESOLVE`).
    package var resolve: [String] = []
    /// Whether a redirect is followed (never https to http). An install report's POST follows none: its
    /// body would be re-sent to wherever the answer points, another host included. The runtime cache
    /// follows none either: it passes a 3xx back to the page as received
    /// (docs/protocol.md#neighbours-on-the-device).
    package var followsRedirects = true
    /// Refuse to connect to a loopback, link-local or private address (`PrivateAddress`), checked on
    /// the address each connection is made to, so no name that resolves there (or re-resolves there
    /// later: DNS rebinding) gets through; the transfer then fails with `TransferFailure.privateAddress`.
    package var refusesPrivateAddresses = false

    package init(
        url: URL, headers: [(String, String)] = [], limits: RetrievalLimits = .init(), deadline: TransferDeadline? = nil,
        connectTimeout: TimeInterval = 15, caBundle: String? = nil
    ) {
        self.url = url
        self.headers = headers
        self.limits = limits
        self.deadline = deadline
        self.connectTimeout = connectTimeout
        self.caBundle = caBundle
    }
}

/// The status line and headers of a response (names lowercased). File URLs report status 200.
package struct TransferResponseHead: Sendable {
    package var status: Int
    package var headers: [String: String]
    /// Every header line in order, repeated names kept (`Set-Cookie`), names as the server spelled them.
    package var fields: [(name: String, value: String)] = []
    /// The protocol the answer came over, as ALPN names it (`http/1.1`, `h2`, `h3`); nil when not known
    /// (a file URL, a transport that does not say).
    package var httpVersion: String?

    package init(
        status: Int, headers: [String: String], fields: [(name: String, value: String)] = [], httpVersion: String? = nil
    ) {
        self.status = status
        self.headers = headers
        self.fields = fields
        self.httpVersion = httpVersion
    }

    package var isSuccess: Bool { (200..<300).contains(status) }

    /// Why this response is a failed transfer, for a status that is not success.
    package var failure: TransferFailure { TransferFailure(status: status, retryAfter: retryAfter) }

    /// The length of the whole resource as the response declares it: `Content-Length` of a 200, the
    /// total of a 206's `Content-Range` (`bytes 0-99/1234`); nil when it is not declared, or when a
    /// server sent a content coding despite `Accept-Encoding: identity` (the length is then the coded one).
    package var declaredTotalLength: Int64? {
        if let coding = headers["content-encoding"], coding.lowercased() != "identity" { return nil }
        if status == 206 {
            guard let range = headers["content-range"], let slash = range.lastIndex(of: "/") else { return nil }
            return Int64(range[range.index(after: slash)...].trimmingWhitespace())
        }
        guard status == 200, let length = headers["content-length"] else { return nil }
        return Int64(length.trimmingWhitespace())
    }

    /// `Retry-After` in seconds (the delta-seconds form, or an HTTP date), if the server sent one.
    package var retryAfter: TimeInterval? {
        guard let value = headers["retry-after"]?.trimmingWhitespace() else { return nil }
        if let seconds = TimeInterval(value) { return max(0, seconds) }
        return HTTPDate.parse(value).map { max(0, $0.timeIntervalSinceNow) }
    }
}
