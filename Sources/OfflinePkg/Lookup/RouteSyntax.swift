import FoundationEssentials

/// The one rule set for route prefixes, at `publish --route` and in every manifest a device reads:
/// a route is written exactly as a browser sends its URLs, so that it can match them.
///
/// A browser lowercases the scheme and host, sends an internationalised host in its `xn--` form,
/// rewrites IP addresses canonically (`0x7f.1` → `127.0.0.1`, `[0:0::1]` → `[::1]`), drops a default
/// port, turns `\` into `/`, resolves dot-segments and percent-encodes spaces and non-ASCII bytes of the
/// path. A route in any other spelling is refused with the spelling to use, rather than rewritten: the
/// manifest is signed and shown in `status`, so what it says is what is matched. Userinfo, a query, a
/// fragment, control bytes and ports outside 1–65535 have no spelling a browser sends and are refused.
package enum RouteSyntax {
    /// Nil when `route` is a canonical absolute http(s) prefix ending in `/`; otherwise why not, starting
    /// with the quoted route, and the form to write when there is one.
    package static func problem(with route: String) -> String? {
        do {
            let canonical = try canonicalize(route)
            if canonical.text == route { return nil }
            return "\(quoted(route)) is not written as a browser sends it (\(canonical.fixes.joined(separator: "; "))): "
                + "write \(quoted(canonical.text))"
        } catch {
            return "\(quoted(route)) \(error.reason)"
        }
    }

    struct Canonical {
        var text: String
        /// What was changed, for the message.
        var fixes: [String]
    }

    /// A route no browser can send in any spelling.
    struct Refusal: Error {
        var reason: String
    }

    private static func canonicalize(_ route: String) throws(Refusal) -> Canonical {
        func refuse(_ reason: String) -> Refusal { Refusal(reason: reason) }
        if let control = route.unicodeScalars.first(where: { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) }) {
            throw refuse("contains the control character \(TextFormat.codePoint(control)), which no URL holds")
        }
        var fixes = [String]()
        var rest = Substring(route)
        if rest.contains("\\") {
            // Browsers read "\" as "/" in http(s) URLs; the route would then name another place than it shows.
            rest = Substring(rest.replacing("\\", with: "/"))
            fixes.append("a backslash is sent as /")
        }
        // Delimiters are found by Unicode scalar, never by Character: a combining mark after "/" makes
        // one Character of the two, and the slash would be missed (bytes are bytes, docs/protocol.md#conventions).
        guard let colon = rest.unicodeScalars.firstIndex(of: ":") else { throw refuse("is not an absolute http or https URL") }
        let scheme = rest[..<colon]
        guard scheme.lowercased() == "http" || scheme.lowercased() == "https" else {
            throw refuse("is not an absolute http or https URL (scheme \(quoted(String(scheme))))")
        }
        if scheme != scheme.lowercased() { fixes.append("the scheme is lowercase") }
        let isHTTPS = scheme.lowercased() == "https"
        rest = rest[rest.index(after: colon)...]
        guard rest.unicodeScalars.starts(with: "//".unicodeScalars) else {
            throw refuse("is not an absolute URL: expected // after \(scheme):")
        }
        rest = rest[rest.unicodeScalars.index(rest.startIndex, offsetBy: 2)...]

        let authorityEnd = rest.unicodeScalars.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        rest = rest[authorityEnd...]
        if let at = authority.unicodeScalars.lastIndex(of: "@") {
            authority = authority[authority.unicodeScalars.index(after: at)...]
            fixes.append("userinfo is never sent in a request")
        }
        let (host, port) = try hostAndPort(authority, isHTTPS: isHTTPS, fixes: &fixes)

        let pathEnd = rest.unicodeScalars.firstIndex { $0 == "?" || $0 == "#" } ?? rest.endIndex
        if pathEnd != rest.endIndex {
            fixes.append(rest.unicodeScalars[pathEnd] == "?" ? "a query is never part of a route" : "a fragment is never sent")
        }
        var path = try canonicalPath(String(rest[..<pathEnd]), fixes: &fixes)
        if !path.hasSuffix("/") {
            path += "/"
            fixes.append("a route ends in /")
        }
        let text = "\(isHTTPS ? "https" : "http")://\(host)\(port.map { ":\($0)" } ?? "")\(path)"
        guard RouteKey.normalized(text) != nil else { throw refuse("is not an absolute http or https URL prefix") }
        return Canonical(text: text, fixes: fixes)
    }

    private static func hostAndPort(_ authority: Substring, isHTTPS: Bool, fixes: inout [String]) throws(Refusal) -> (String, Int?) {
        var hostText: Substring
        var portText: Substring?
        let scalars = authority.unicodeScalars
        if scalars.first == "[" {
            guard let close = scalars.firstIndex(of: "]") else { throw Refusal(reason: "has an IPv6 address without its closing ]") }
            let afterClose = scalars.index(after: close)
            hostText = authority[..<afterClose]
            let after = authority[afterClose...]
            if !after.isEmpty {
                guard after.unicodeScalars.first == ":" else {
                    throw Refusal(reason: "has \(quoted(String(after))) after its IPv6 address")
                }
                portText = after[after.unicodeScalars.index(after: after.startIndex)...]
            }
        } else if let colon = scalars.firstIndex(of: ":") {
            hostText = authority[..<colon]
            portText = authority[scalars.index(after: colon)...]
        } else {
            hostText = authority
        }
        let host = try canonicalHost(String(hostText), fixes: &fixes)
        guard let portText else { return (host, nil) }
        if portText.isEmpty {
            fixes.append("an empty port is dropped")
            return (host, nil)
        }
        guard portText.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw Refusal(reason: "has the port \(quoted(String(portText))), which is not a number")
        }
        let digits = portText.drop { $0 == "0" }
        guard let port = Int(digits.prefix(6)), (1...65535).contains(port), digits.count <= 5 else {
            throw Refusal(reason: "has the port \(portText), outside 1–65535")
        }
        if digits.count != portText.count { fixes.append("a port has no leading zeros") }
        if port == (isHTTPS ? 443 : 80) {
            fixes.append("the default port :\(port) is never sent")
            return (host, nil)
        }
        return (host, port)
    }

    private static func canonicalHost(_ text: String, fixes: inout [String]) throws(Refusal) -> String {
        guard !text.isEmpty else { throw Refusal(reason: "has no host") }
        if text.hasPrefix("[") {
            let inner = String(text.dropFirst().dropLast())
            guard let pieces = IPAddressText.parseIPv6(inner) else {
                throw Refusal(reason: "has \(quoted(text)), which is not an IPv6 address (zone ids are never sent)")
            }
            let canonical = "[\(IPAddressText.formatIPv6(pieces))]"
            if canonical != text { fixes.append("an IPv6 address is sent in RFC 5952 form") }
            return canonical
        }
        var labels = [String]()
        var internationalised = false
        for scalars in text.unicodeScalars.split(separator: ".", omittingEmptySubsequences: false) {
            // `String(_:)` of the slice, not a new UnicodeScalarView appended to: that generic path's
            // first use costs a sync more than reading the rest of the manifest.
            let label = String(scalars)
            if label.unicodeScalars.allSatisfy(\.isASCII) {
                labels.append(label.lowercased())
                continue
            }
            // IDNA (UTS 46) maps a label to lowercase NFC before Punycode; that covers the names people write.
            // The standard library's own NFC (what Foundation's `precomposedStringWithCanonicalMapping` gives).
            let mapped = String(decoding: label.lowercased()._nfcCodeUnits, as: UTF8.self)
            guard let encoded = Punycode.encode(mapped) else { throw Refusal(reason: "has a host label too long to encode") }
            labels.append("xn--" + encoded)
            internationalised = true
        }
        var host = labels[0]
        for label in labels[1...] { host += "." + label }
        if internationalised { fixes.append("an international host is sent in its xn-- (IDNA) form") }
        if IPAddressText.endsInNumber(host) {
            guard let address = IPAddressText.parseIPv4(host) else {
                throw Refusal(reason: "has \(quoted(text)), which ends in a number but is not an IPv4 address")
            }
            let canonical = IPAddressText.formatIPv4(address)
            if canonical != host { fixes.append("an IPv4 address is sent in dotted decimal") }
            return canonical
        }
        if host != text && !internationalised { fixes.append("the host is lowercase") }
        guard !labels.contains(where: \.isEmpty) else { throw Refusal(reason: "has an empty label in its host \(quoted(text))") }
        // RFC 1035's bounds, as a browser's IDNA step applies them: no spelling of such a host exists.
        if let long = labels.first(where: { $0.utf8.count > 63 }) {
            throw Refusal(reason: "has the host label \(quoted(long)), longer than 63 bytes")
        }
        if host.utf8.count > 253 { throw Refusal(reason: "has a host longer than 253 bytes") }
        if let bad = host.unicodeScalars.first(where: { !Self.isHostCharacter($0) }) {
            throw Refusal(reason: "has \(quoted(String(bad))) in its host, which a host name never holds")
        }
        return host
    }

    private static func isHostCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "0"..."9", "-", ".", "_": true
        default: false
        }
    }

    /// The path as a browser sends it: dot-segments resolved, spaces, quotes, angle brackets, backticks,
    /// braces and non-ASCII bytes percent-encoded; an escape of `/` or NUL refused (lookups never match it).
    private static func canonicalPath(_ path: String, fixes: inout [String]) throws(Refusal) -> String {
        guard !path.isEmpty else { return "" }
        var segments = [String]()
        // Split by byte: a "/" followed by a combining mark is one Character, but still a separator.
        let raw = path.utf8.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        var encoded = false
        var badEscape = false
        var dotSegments = false
        for (index, segment) in raw.enumerated() {
            var out = ""
            var bytes = Array(segment)[...]
            while let byte = bytes.popFirst() {
                if byte == UInt8(ascii: "%") {
                    let hex = bytes.prefix(2)
                    if hex.count == 2, let value = UInt8(String(decoding: hex, as: UTF8.self), radix: 16) {
                        if value == UInt8(ascii: "/") || value == 0 {
                            throw Refusal(reason: "has %\(String(decoding: hex, as: UTF8.self)) in its path, an escaped / or NUL that no lookup matches")
                        }
                        out += "%" + String(decoding: hex, as: UTF8.self)
                        bytes = bytes.dropFirst(2)
                    } else {
                        out += "%25"
                        badEscape = true
                    }
                } else if byte >= 0x80 || Self.browserEncodes(byte) {
                    out += "%" + Hex.encode([byte]).uppercased()
                    encoded = true
                } else {
                    out.unicodeScalars.append(Unicode.Scalar(byte))
                }
            }
            let decoded = out.lowercased().replacing("%2e", with: ".")
            if decoded == "." || decoded == ".." {
                dotSegments = true
                if decoded == ".." && !segments.isEmpty { segments.removeLast() }
                if index == raw.count - 1 { segments.append("") }
                continue
            }
            segments.append(out)
        }
        if encoded { fixes.append("spaces, quotes, <>`{} and non-ASCII bytes of a path are sent percent-encoded") }
        if badEscape { fixes.append("a % that starts no escape is written %25") }
        if dotSegments { fixes.append("dot-segments are resolved") }
        return "/" + segments.joined(separator: "/")
    }

    /// The bytes the WHATWG path percent-encode set adds to controls and non-ASCII: space " < > ` { }.
    private static func browserEncodes(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x20, UInt8(ascii: "\""), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "`"), UInt8(ascii: "{"), UInt8(ascii: "}"):
            true
        default: false
        }
    }

    private static func quoted(_ text: String) -> String { "\"" + OfflinePkgError.escaped(text) + "\"" }
}
