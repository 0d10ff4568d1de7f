#if canImport(Glibc)
import Glibc
#endif

/// Addresses the runtime cache never reaches on a page's behalf (docs/protocol.md#neighbours-on-the-device):
/// this machine (loopback, `0.0.0.0`, which Linux connects to the machine itself), link-local (the
/// cloud metadata service at 169.254.169.254), the private ranges of RFC 1918, carrier-grade NAT
/// (100.64/10), unique-local and site-local IPv6, and IPv4 addresses written as IPv6 (mapped,
/// compatible, NAT64's 64:ff9b::/96) that are any of these. What a device's own network holds: a page
/// that made the device fetch them would read the device's and its network's services with the
/// device's access.
package enum PrivateAddress {
    /// Whether the IPv4 address (host byte order) is one.
    package static func contains(v4 address: UInt32) -> Bool {
        let first = address >> 24
        let second = (address >> 16) & 0xff
        switch first {
        case 0, 10, 127: return true
        case 100: return second & 0xc0 == 64
        case 169: return second == 254
        case 172: return second & 0xf0 == 16
        case 192: return second == 168
        default: return address == 0xffff_ffff
        }
    }

    /// Whether the IPv6 address (16 bytes, network order) is one.
    package static func contains(v6 bytes: [UInt8]) -> Bool {
        guard bytes.count == 16 else { return false }
        let leadingZeros = bytes.prefix(10).allSatisfy { $0 == 0 }
        let v4 = UInt32(bytes[12]) << 24 | UInt32(bytes[13]) << 16 | UInt32(bytes[14]) << 8 | UInt32(bytes[15])
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, ::1 and :: among them).
        if leadingZeros && bytes[10] == 0xff && bytes[11] == 0xff { return contains(v4: v4) }
        if leadingZeros && bytes[10] == 0 && bytes[11] == 0 { return v4 <= 1 || contains(v4: v4) }
        // 64:ff9b::/96, NAT64's well-known prefix: on an IPv6-only network the gateway connects to the
        // IPv4 address in the last four bytes, a private one among them (RFC 6052).
        if bytes.prefix(12).elementsEqual([0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0]) { return contains(v4: v4) }
        if bytes[0] & 0xfe == 0xfc { return true }  // fc00::/7, unique-local
        if bytes[0] == 0xfe && bytes[1] & 0xc0 == 0x80 { return true }  // fe80::/10, link-local
        if bytes[0] == 0xfe && bytes[1] & 0xc0 == 0xc0 { return true }  // fec0::/10, site-local
        return false
    }

    /// The address of a URL host written as an IP literal — an IPv6 literal in brackets, or an IPv4 one in
    /// any form a browser or `inet_aton` reads (`127.1`, `0x7f.0.0.1`, `2130706433`) — when it is one of
    /// these; nil for a name or a public address.
    package static func literal(_ host: String) -> String? {
        if host.hasPrefix("[") && host.hasSuffix("]") {
            guard let pieces = IPAddressText.parseIPv6(String(host.dropFirst().dropLast())) else { return nil }
            let bytes = pieces.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }
            return contains(v6: bytes) ? host : nil
        }
        guard IPAddressText.endsInNumber(host), let address = IPAddressText.parseIPv4(host) else { return nil }
        return contains(v4: address) ? IPAddressText.formatIPv4(address) : nil
    }

    /// The address a socket is about to connect to, as text, when it is one of these (libcurl's
    /// open-socket callback hands it over); nil otherwise.
    package static func refused(_ address: UnsafePointer<sockaddr>) -> String? {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            let v4 = UnsafeRawPointer(address).load(as: sockaddr_in.self)
            let host = UInt32(bigEndian: v4.sin_addr.s_addr)
            return contains(v4: host) ? IPAddressText.formatIPv4(host) : nil
        case AF_INET6:
            let v6 = UnsafeRawPointer(address).load(as: sockaddr_in6.self)
            let bytes = withUnsafeBytes(of: v6.sin6_addr) { Array($0) }
            guard contains(v6: bytes) else { return nil }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            var copy = v6.sin6_addr
            return inet_ntop(AF_INET6, &copy, &text, socklen_t(text.count)) != nil
                ? "[" + String(cString: text) + "]" : "an IPv6 address"
        default:
            return nil
        }
    }
}
