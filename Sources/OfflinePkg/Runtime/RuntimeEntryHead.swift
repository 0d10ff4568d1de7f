import FoundationEssentials

/// What the runtime cache keeps of one stored answer besides its body: the `.meta` file, which is
/// also the index entry (a body no head names is an orphan that `gc` removes).
package struct RuntimeEntryHead: Codable, Sendable, Equatable {
    /// The upstream URL, query included.
    package var url: String
    /// The names the answer varies on (lowercased, sorted) and the request's values for them.
    package var vary: [String]
    package var varyValues: [String]
    package var status: Int
    /// End-to-end header fields as `[name, value]` pairs, in the order received.
    package var headers: [[String]]
    /// When the answer was received or last validated (seconds since 1970): its age counts from here.
    package var storedAt: Double
    /// The body's file name in `runtime/bodies/`, and its size.
    package var body: String
    package var size: Int64
    /// For a rule that keeps answers per credential (docs/protocol.md#neighbours-on-the-device): the hash of the request's `Authorization`
    /// and `Cookie` fields (`HTTPCachePolicy.credentialHash`); nil for an answer to a request without.
    package var credential: String?
    /// The store's format: nil for a head written before answers were kept per credential, which may
    /// hold a credentialed or `Set-Cookie` answer any request would get, and is dropped at the next open.
    package var format: Int?

    /// The format this build writes.
    package static let currentFormat = 2

    /// The stored fields: never a per-client one, which are left out when an answer is stored or renewed,
    /// and heads of an older format (that may hold one) are dropped when the store opens.
    package var fields: [(name: String, value: String)] { headers.map { ($0[0], $0.count > 1 ? $0[1] : "") } }

    package static func pairs(_ fields: [(name: String, value: String)]) -> [[String]] { fields.map { [$0.name, $0.value] } }

    package var etag: String? { HTTPCachePolicy.value("etag", in: fields) }
    package var lastModified: String? { HTTPCachePolicy.value("last-modified", in: fields) }

    /// `Cache-Control: no-cache` (or `max-age=0`) on the answer: every use must revalidate it first.
    package var mustRevalidate: Bool {
        let directives = HTTPCachePolicy.cacheControl(fields)
        return directives["no-cache"] != nil || directives["max-age"] == "0"
    }

    /// The in-memory index key: the URL, the varying request values and the credential's hash.
    package var variant: String { Self.variant(url: url, vary: vary, values: varyValues, credential: credential) }

    /// The entry's file name: sha256 of `variant`, so no URL text reaches a file name. Not needed on a
    /// hit, which looks `variant` up in memory.
    package var key: String { SHA256.hash(Array(variant.utf8)).hex }

    package static func variant(url: String, vary: [String], values: [String], credential: String? = nil) -> String {
        var text = url
        for (name, value) in zip(vary, values) { text += "\n\(name): \(value)" }
        if let credential { text += "\ncredential: \(credential)" }
        return text
    }

    package func age(now: Date) -> Double { max(0, now.timeIntervalSince1970 - storedAt) }

    package func isFresh(maxAge: Int, now: Date) -> Bool { !mustRevalidate && age(now: now) < Double(maxAge) }
}
