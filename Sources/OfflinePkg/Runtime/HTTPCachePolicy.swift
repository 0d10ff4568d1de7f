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

    /// Request fields a shared cache never passes upstream (docs/protocol.md#neighbours-on-the-device), whatever their case: how the
    /// request reached the device (`Forwarded`, `X-Forwarded-*`, `Via`, `Proxy-*`), which no page may
    /// claim; the client addresses other proxies vouch for (`X-Real-IP`, `True-Client-IP`, ...); and the
    /// overrides some servers and frameworks honour of the URL (`X-Original-URL`, `X-Rewrite-URL`,
    /// `X-Host`) or the method (`X-HTTP-Method-Override`): each would let a page make the upstream answer
    /// another request than the one the cache keys the answer by. nginx's and Varnish's defaults set
    /// `X-Forwarded-For` themselves; offlinepkg is the client's own device and sends none.
    package static func isNeverForwarded(_ lowercasedName: String) -> Bool {
        if neverForwarded.contains(lowercasedName) { return true }
        return lowercasedName.hasPrefix("x-forwarded-") || lowercasedName.hasPrefix("proxy-")
    }

    private static let neverForwarded: Set<String> = [
        "forwarded", "via", "x-real-ip", "x-client-ip", "client-ip", "true-client-ip", "cf-connecting-ip",
        "fastly-client-ip", "x-cluster-client-ip", "x-original-forwarded-for", "x-original-url", "x-rewrite-url",
        "x-original-host", "x-host", "x-http-method-override", "x-http-method", "x-method-override", "max-forwards",
    ]

    /// RFC 9110 §5.1: a field name is a token. A name with a space or other separator (`X-Forwarded-Host `,
    /// as a lax server might still read it) is not forwarded at all.
    package static func isToken(_ name: String) -> Bool {
        !name.isEmpty
            && name.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"):
                    true
                default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
                }
            }
    }

    /// The request fields that carry a credential (docs/protocol.md#neighbours-on-the-device): an answer to a request with one is
    /// stored only by a rule that keeps answers per credential.
    package static func isCredential(_ lowercasedName: String) -> Bool {
        lowercasedName == "authorization" || lowercasedName == "cookie"
    }

    /// A hash of the request's credentials (every `Authorization` and `Cookie` field, names
    /// lowercased, in the order received), or nil when it carries none: the part of a stored answer's
    /// key that keeps one credential's answers from every other (docs/protocol.md#neighbours-on-the-device).
    package static func credentialHash(_ request: [(name: String, value: String)]) -> String? {
        // Asked on every hit: the common request without a credential costs a length test per field,
        // no lowercased copy of each name.
        guard request.contains(where: { isCredentialName($0.name) }) else { return nil }
        let credentials = request.filter { isCredentialName($0.name) }
        let text = credentials.map { "\($0.name.lowercased()): \($0.value)" }.joined(separator: "\n")
        return SHA256.hash(Array(text.utf8)).hex
    }

    /// `isCredential` for a name in any case, without a lowercased copy: ASCII letters only, so `| 0x20`
    /// folds exactly the uppercase ones.
    private static func isCredentialName(_ name: String) -> Bool {
        let count = name.utf8.count
        guard count == 6 || count == 13 else { return false }
        return name.utf8.elementsEqual(count == 6 ? "cookie".utf8 : "authorization".utf8) { $0 | 0x20 == $1 }
    }

    /// Response fields never stored nor answered from the store: `Set-Cookie` gives one client its
    /// session, and goes only to the request whose answer carried it (docs/protocol.md#neighbours-on-the-device).
    package static func isPerClient(_ lowercasedName: String) -> Bool {
        lowercasedName == "set-cookie" || lowercasedName == "set-cookie2"
    }

    /// `fields` without the per-client ones.
    package static func storable(_ fields: [(name: String, value: String)]) -> [(name: String, value: String)] {
        fields.filter { !isPerClient($0.name.lowercased()) }
    }

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

    /// Why a response to a GET may not be stored (RFC 9111 §3), or nil when it may. `separate`: the
    /// rule keeps answers per credential (docs/protocol.md#neighbours-on-the-device); without it, an answer to a request that carries
    /// a credential, or one marked `private`, is for that client alone and never stored (RFC 9111
    /// §3.5 and §5.2.2.7, as a shared cache: other users' and other pages' requests come here too).
    package static func refusal(
        status: Int, fields: [(name: String, value: String)], requestFields: [(name: String, value: String)],
        separate: Bool = false
    ) -> String? {
        guard status == 200 else { return "status \(status)" }
        let directives = cacheControl(fields)
        if directives["no-store"] != nil { return "no-store" }
        if cacheControl(requestFields)["no-store"] != nil { return "no-store in the request" }
        if vary(fields) == ["*"] { return "vary: *" }
        if !separate {
            if directives["private"] != nil { return "private" }
            if credentialHash(requestFields) != nil { return "a credential in the request" }
        }
        return nil
    }

    /// RFC 9111 §4.3.4: the stored fields updated by a 304's, except the ones that describe the body
    /// and the per-client ones.
    package static func merge(stored: [(name: String, value: String)], notModified: [(name: String, value: String)])
        -> [(name: String, value: String)]
    {
        let kept: Set<String> = ["content-length", "content-encoding", "content-range", "transfer-encoding"]
        let updates = storable(endToEnd(notModified)).filter { !kept.contains($0.name.lowercased()) }
        let replaced = Set(updates.map { $0.name.lowercased() })
        return stored.filter { !replaced.contains($0.name.lowercased()) } + updates
    }

    /// The first value of `name` (case-insensitive) in `fields`.
    package static func value(_ name: String, in fields: [(name: String, value: String)]) -> String? {
        fields.first { $0.name.lowercased() == name }?.value
    }

    /// The request's value for each varying name, "" when absent; several fields of one name joined. A
    /// credential's value (an answer that varies on `Authorization` or `Cookie`) is kept as its hash: the
    /// head files that hold these values never hold a token or a session (docs/protocol.md#neighbours-on-the-device).
    package static func varyValues(_ names: [String], request: [(name: String, value: String)]) -> [String] {
        names.map { name in
            let value = request.filter { $0.name.lowercased() == name }.map(\.value).joined(separator: ", ")
            guard isCredential(name), !value.isEmpty else { return value }
            return "sha256:" + SHA256.hash(Array(value.utf8)).hex
        }
    }
}
