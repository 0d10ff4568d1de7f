import Foundation

/// What goes upstream (docs/protocol.md#neighbours-on-the-device): the URL the rule was matched on,
/// and only the request fields a shared cache may pass on.
extension RuntimeCache {
    /// The URL fetched upstream, rebuilt from the normalised key the rule matched (docs/protocol.md#lookups: host
    /// lowercased, default port dropped, userinfo gone, path decoded with its dot-segments resolved)
    /// with the rule's scheme — a shell asks the loopback server over http for an https API — the path
    /// percent-encoded again, and the request's query as it came; never a fragment. So a target the
    /// rule matched as `/v1/x` (`/admin/%2e%2e/v1/x`, `//v1/./x`) is fetched as `/v1/x`, and no userinfo
    /// becomes an `Authorization` upstream. Nil for a URL that has no key.
    static func upstreamURL(_ url: String, rule: RuntimeRule) -> String? {
        LookupURL.withKey(url) { upstreamURL(key: $0, url: url, rule: rule) }
    }

    /// The same from `url`'s key, already computed.
    static func upstreamURL(key: LookupURL.Key, url: String, rule: RuntimeRule) -> String? {
        guard let separator = rule.prefix.range(of: "://") else { return nil }
        var text = rule.prefix[..<separator.lowerBound].lowercased() + "://"
        let bytes = key.bytes
        text += String(decoding: bytes[..<key.pathStart], as: UTF8.self)
        let path = bytes[key.pathStart...]
        if path.allSatisfy(isPathByte) {
            text += String(decoding: path, as: UTF8.self)
        } else {
            for byte in path {
                if isPathByte(byte) {
                    text.unicodeScalars.append(Unicode.Scalar(byte))
                } else {
                    text += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xf, radix: 16, uppercase: true)
                }
            }
        }
        var rest = Substring(url)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        if let mark = rest.firstIndex(of: "?") { text += rest[mark...] }
        return text
    }

    /// Whether a decoded path byte stands as it is in a URL: RFC 3986's unreserved characters,
    /// sub-delims, `:`, `@` and `/`. Any other (`%`, `?`, `#`, spaces, controls, non-ASCII) is
    /// percent-encoded.
    private static func isPathByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default: "-._~!$&'()*+,;=:@/".utf8.contains(byte)
        }
    }

    /// The request fields sent upstream: the client's end-to-end ones whose names are tokens, less
    /// those the cache sets itself (`HTTPCachePolicy.requestFieldsNotForwarded`) and those a shared
    /// cache never passes on (`HTTPCachePolicy.neverForwarded`): how the request reached the device,
    /// and overrides of its URL, method or client address.
    static func forwardedFields(_ fields: [(name: String, value: String)]) -> [(String, String)] {
        HTTPCachePolicy.endToEnd(fields).compactMap { field in
            let name = field.name.lowercased()
            guard HTTPCachePolicy.isToken(name), !HTTPCachePolicy.requestFieldsNotForwarded.contains(name),
                !HTTPCachePolicy.isNeverForwarded(name)
            else { return nil }
            return (field.name, field.value)
        }
    }

    /// The fields of a background refresh of `stored`: what the stored answer is keyed by and nothing
    /// else of the request that found it stale (whose other headers would shape the answer every later
    /// request gets) — the varying fields with their stored values, and the credential of an answer kept
    /// per credential (the request's, which hashes to the stored one).
    static func refreshFields(of stored: RuntimeEntryHead, request: [(name: String, value: String)]) -> [(
        name: String, value: String
    )] {
        var fields = [(name: String, value: String)]()
        for (name, value) in zip(stored.vary, stored.varyValues) where !value.isEmpty && !HTTPCachePolicy.isCredential(name) {
            fields.append((name, value))
        }
        if stored.credential != nil { fields += request.filter { HTTPCachePolicy.isCredential($0.name.lowercased()) } }
        return fields
    }
}
