import FoundationEssentials

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
        LookupURL.withKey(url) { upstreamURL(key: $0, url: url, scheme: scheme(of: rule)) }
    }

    /// The same from `url`'s key, already computed, and the rule's scheme (`scheme(of:)`). On every hit:
    /// bytes scanned as bytes, never as `Character`s.
    static func upstreamURL(key: LookupURL.Key, url: String, scheme: String) -> String {
        let bytes = key.bytes
        let path = bytes[key.pathStart...]
        var text = scheme
        text.reserveCapacity(scheme.utf8.count + bytes.count + 16)
        text += String(decoding: bytes[..<key.pathStart], as: UTF8.self)
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
        // The query: from the first "?" to a "#" (a "?" after the "#" belongs to the fragment).
        let utf8 = url.utf8
        let hash = utf8.firstIndex(of: UInt8(ascii: "#")) ?? utf8.endIndex
        if let mark = utf8[..<hash].firstIndex(of: UInt8(ascii: "?")) { text += Substring(utf8[mark..<hash]) }
        return text
    }

    /// `https://` or `http://`, as the rule's prefix names it (lowercased).
    static func scheme(of rule: RuntimeRule) -> String {
        rule.prefix.utf8.first.map { $0 | 0x20 } == UInt8(ascii: "h") && rule.prefix.utf8.dropFirst(4).first.map { $0 | 0x20 } == UInt8(ascii: "s")
            ? "https://" : "http://"
    }

    /// Whether a decoded path byte stands as it is in a URL: RFC 3986's unreserved characters,
    /// sub-delims, `:`, `@` and `/`. Any other (`%`, `?`, `#`, `"`, space, controls, non-ASCII) is
    /// percent-encoded.
    private static func isPathByte(_ byte: UInt8) -> Bool {
        switch byte {
        // ! $ & ' ( ) * + , - . / 0-9 : ; = @ A-Z _ a-z ~
        case 0x21, 0x24, 0x26...0x3b, 0x3d, 0x40...0x5a, 0x5f, 0x61...0x7a, 0x7e: true
        default: false
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
