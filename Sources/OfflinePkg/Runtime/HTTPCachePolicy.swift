import FoundationEssentials

/// The rules of RFC 9111 the runtime cache applies as a private cache: what may be stored, which
/// headers travel with a stored answer, how a 304 updates it, and how `Vary` keys it.
package enum HTTPCachePolicy {
    /// Hop-by-hop fields (RFC 9110 §7.6.1) and fields the server side sets itself: never stored, never
    /// passed on. Lowercase.
    package static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
        "proxy-authenticate", "proxy-authorization", "content-length",
    ]

    /// Request fields the cache sets itself for an upstream request (conditionals, ranges, coding).
    package static let requestFieldsNotForwarded: Set<String> = [
        "host", "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range", "range",
        "accept-encoding", "expect", "cache-status",
    ]

    /// `fields` without hop-by-hop ones, including every name a `Connection` field lists.
    package static func endToEnd(_ fields: [(name: String, value: String)]) -> [(name: String, value: String)] {
        var dropped = hopByHop
        for field in fields where field.name.lowercased() == "connection" {
            for name in field.value.split(separator: ",") {
                dropped.insert(name.trimmingWhitespace().lowercased())
            }
        }
        return fields.filter { !dropped.contains($0.name.lowercased()) }
    }

    /// The directives of every `Cache-Control` field, names lowercased, values unquoted.
    package static func cacheControl(_ fields: [(name: String, value: String)]) -> [String: String] {
        var directives = [String: String]()
        for field in fields where field.name.lowercased() == "cache-control" {
            for part in field.value.split(separator: ",") {
                let item = part.trimmingWhitespace()
                guard !item.isEmpty else { continue }
                if let equals = item.firstIndex(of: "=") {
                    let value = item[item.index(after: equals)...].trimming { $0 == "\"" || $0 == " " }
                    directives[item[..<equals].lowercased()] = value
                } else {
                    directives[item.lowercased()] = ""
                }
            }
        }
        return directives
    }

    /// The names a response varies on, lowercased and sorted; `["*"]` for `Vary: *`.
    package static func vary(_ fields: [(name: String, value: String)]) -> [String] {
        var names = Set<String>()
        for field in fields where field.name.lowercased() == "vary" {
            for name in field.value.split(separator: ",") {
                let name = name.trimmingWhitespace().lowercased()
                if !name.isEmpty { names.insert(name) }
            }
        }
        return names.contains("*") ? ["*"] : names.sorted()
    }

    /// Why a response to a GET may not be stored (RFC 9111 §3), or nil when it may.
    package static func refusal(
        status: Int, fields: [(name: String, value: String)], requestFields: [(name: String, value: String)]
    ) -> String? {
        guard status == 200 else { return "status \(status)" }
        if cacheControl(fields)["no-store"] != nil { return "no-store" }
        if cacheControl(requestFields)["no-store"] != nil { return "no-store in the request" }
        if vary(fields) == ["*"] { return "vary: *" }
        return nil
    }

    /// RFC 9111 §4.3.4: the stored fields updated by a 304's, except the ones that describe the body.
    package static func merge(stored: [(name: String, value: String)], notModified: [(name: String, value: String)])
        -> [(name: String, value: String)]
    {
        let kept: Set<String> = ["content-length", "content-encoding", "content-range", "transfer-encoding"]
        let updates = endToEnd(notModified).filter { !kept.contains($0.name.lowercased()) }
        let replaced = Set(updates.map { $0.name.lowercased() })
        return stored.filter { !replaced.contains($0.name.lowercased()) } + updates
    }

    /// The first value of `name` (case-insensitive) in `fields`.
    package static func value(_ name: String, in fields: [(name: String, value: String)]) -> String? {
        fields.first { $0.name.lowercased() == name }?.value
    }

    /// The request's value for each varying name, "" when absent; several fields of one name joined.
    package static func varyValues(_ names: [String], request: [(name: String, value: String)]) -> [String] {
        names.map { name in request.filter { $0.name.lowercased() == name }.map(\.value).joined(separator: ", ") }
    }
}
