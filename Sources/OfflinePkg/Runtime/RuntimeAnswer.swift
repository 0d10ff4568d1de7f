import FoundationEssentials

/// A request the runtime cache answers: an absolute URL, a method, the request's header fields, and
/// for methods other than GET and HEAD the body, pulled as it is sent upstream.
package struct RuntimeRequest: Sendable {
    package var url: String
    package var method: String
    package var fields: [(name: String, value: String)]
    package var body: (@Sendable (UnsafeMutableRawBufferPointer) -> Int)?
    package var bodyLength: Int64?

    package init(
        url: String, method: String = "GET", fields: [(name: String, value: String)] = [],
        body: (@Sendable (UnsafeMutableRawBufferPointer) -> Int)? = nil, bodyLength: Int64? = nil
    ) {
        self.url = url
        self.method = method
        self.fields = fields
        self.body = body
        self.bodyLength = bodyLength
    }
}

/// Where an answer's body is.
package enum RuntimeBody: Sendable {
    case empty
    case data(Data)
    /// A stored body: a file of the cache, read as it is (eviction may unlink it later; an open
    /// descriptor keeps it readable).
    case stored(path: String, length: Int64)
    /// A body that is not stored, read once as it arrives from upstream; a consumer that does not read
    /// it cancels it, which ends the transfer.
    case streamed(RuntimeStream)
}

/// The runtime cache's answer to one request, with its RFC 9211 `Cache-Status` value.
package struct RuntimeAnswer: Sendable {
    package var status: Int
    package var fields: [(name: String, value: String)]
    package var body: RuntimeBody
    package var cacheStatus: String

    package init(status: Int, fields: [(name: String, value: String)], body: RuntimeBody, cacheStatus: String) {
        self.status = status
        self.fields = fields
        self.body = body
        self.cacheStatus = cacheStatus
    }

    /// The answer when the network cannot be used or reached and nothing is stored.
    static func gatewayTimeout(_ cacheStatus: String, reason: String) -> RuntimeAnswer {
        refusal(status: 504, cacheStatus: cacheStatus, reason: reason)
    }

    /// A short plain-text answer of the cache's own (a 502, 503 or 504) saying why.
    static func refusal(status: Int, cacheStatus: String, reason: String, retryAfter: Int? = nil) -> RuntimeAnswer {
        var fields: [(name: String, value: String)] = [
            ("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store"),
        ]
        if let retryAfter { fields.append(("Retry-After", String(retryAfter))) }
        return RuntimeAnswer(status: status, fields: fields, body: .data(Data((reason + "\n").utf8)), cacheStatus: cacheStatus)
    }
}

/// An answer of the runtime cache for a host's URL hook (a `WKURLSchemeHandler`, a WebKitGTK URI
/// scheme, an `NSURLProtocol`-style interceptor): status, end-to-end headers, the body, and the RFC 9211
/// `Cache-Status` that says where it came from.
public struct CachedResponse: Sendable {
    public enum Body: Sendable {
        case data(Data)
        /// A stored body: read it promptly (or open it), since eviction may remove it later.
        case file(URL)
    }

    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: Body
    /// E.g. `offlinepkg; hit`, `offlinepkg; fwd=miss; stored`.
    public var cacheStatus: String

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? { HTTPCachePolicy.value(name.lowercased(), in: headers) }

    /// The body's bytes, read from its file if need be.
    public func bodyData() throws -> Data {
        switch body {
        case .data(let data): return data
        case .file(let url): return Data(try FileSystem.read(url.path, limit: Int.max))
        }
    }
}
