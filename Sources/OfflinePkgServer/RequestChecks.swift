internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg

/// The 400 rules of docs/protocol.md#the-loopback-server, beyond what MHD refuses itself (with `MHD_OPTION_STRICT_FOR_CLIENT` it
/// answers 400 to an HTTP/1.1 request without `Host`): two `Host` fields, a `Host` that is not
/// host[:port], and a target holding NUL or control bytes. Each would otherwise be resolved as some
/// other URL than the client meant (the first `Host` wins, `t.example/media` is glued into the path,
/// the path is cut at the NUL). A request that fails them is never answered from a package nor
/// forwarded upstream, whatever its method (docs/protocol.md#neighbours-on-the-device).
enum RequestChecks {
    /// Why the request must be refused, or nil.
    static func problem(_ connection: OpaquePointer, target: UnsafePointer<CChar>, version: UnsafePointer<CChar>?) -> String? {
        let length = strlen(target)
        let hasControlByte = target.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
            (0..<length).contains { bytes[$0] < 0x20 || bytes[$0] == 0x7f }
        }
        let recorded = recordedTarget(connection)
        if hasControlByte || recorded?.queryHasControlByte.load(ordering: .relaxed) == true {
            return "the request target holds a control byte"
        }
        // MHD splits the request line in place ("GET\0/target\0HTTP/1.1"), so the version string
        // starts right after the whole target's terminating NUL — unless the target held a NUL of its
        // own, which cut the C string short. MHD also cuts the query off at its "?": the whole target's
        // length is the one recorded before it did (`RecordedTarget`).
        let whole = recorded?.length.load(ordering: .relaxed) ?? length
        if let version, UnsafeRawPointer(version) != UnsafeRawPointer(target + max(whole, length) + 1) {
            return "the request target holds a NUL byte"
        }
        let hosts = cmicrohttpd_field_count(connection, "Host")
        if hosts > 1 { return "\(hosts) Host fields; expected one" }
        if hosts == 1, let host = MHD_lookup_connection_value(connection, .HEADER_KIND, "Host") {
            let bytes = UnsafeRawBufferPointer(start: host, count: strlen(host))
            if !isHostAndPort(bytes) {
                return "Host \"\(String(decoding: bytes, as: UTF8.self))\" is not host[:port]"
            }
        }
        return nil
    }

    /// RFC 9110 §7.2: `uri-host [ ":" port ]`, a reg-name or an IP literal in brackets. An empty
    /// host is refused too: every route names one.
    static func isHostAndPort(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        let count = bytes.count
        if index < count && bytes[index] == UInt8(ascii: "[") {
            index += 1
            let start = index
            while index < count && isIPLiteralByte(bytes[index]) { index += 1 }
            guard index > start, index < count, bytes[index] == UInt8(ascii: "]") else { return false }
            index += 1
        } else {
            let start = index
            while index < count && isRegNameByte(bytes[index]) { index += 1 }
            guard index > start else { return false }
        }
        if index == count { return true }
        guard bytes[index] == UInt8(ascii: ":") else { return false }
        index += 1
        let digits = count - index
        guard digits <= 5 else { return false }
        return (index..<count).allSatisfy { bytes[$0] &- 0x30 <= 9 }
    }

    private static func isRegNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            // unreserved and sub-delims; "%" for pct-encoded.
            "-._~!$&'()*+,;=%".utf8.contains(byte)
        }
    }

    private static func isIPLiteralByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: ":"), UInt8(ascii: "."):
            true
        default: false
        }
    }
}

/// `serve --origin URL`: the scheme and authority (`https://m.example.com`) a request to the server's
/// own address is resolved under.
struct OriginRewrite: Sendable {
    /// The origin's bytes, without a trailing "/": the request target (`/path`) follows.
    let prefix: [UInt8]

    init(_ url: URL) throws {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.host, !host.isEmpty
        else {
            throw OfflinePkgError.invalidArgument(
                "serve --origin takes an http(s) origin such as https://m.example.com, got \(url.absoluteString)")
        }
        guard components.path.isEmpty || components.path == "/", components.query == nil, components.fragment == nil,
            components.user == nil
        else {
            throw OfflinePkgError.invalidArgument(
                "serve --origin takes an origin (scheme://host[:port]) without path, query or user, got \(url.absoluteString)")
        }
        var text = url.absoluteString
        if text.hasSuffix("/") { text.removeLast() }
        prefix = Array(text.utf8)
    }
}
