#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 listening address, parsed from a literal (`localhost` means 127.0.0.1: no resolver,
/// so no surprise from /etc/hosts).
struct SocketAddress: Sendable {
    private enum Storage: Sendable {
        case v4(sockaddr_in)
        case v6(sockaddr_in6)
    }

    private let storage: Storage

    init?(host: String, port: UInt16) {
        let literal = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, literal, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            storage = .v4(v4)
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, literal, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            storage = .v6(v6)
            return
        }
        return nil
    }

    var isIPv6: Bool {
        if case .v6 = storage { return true }
        return false
    }

    /// 127.0.0.0/8 or ::1.
    var isLoopback: Bool {
        switch storage {
        case .v4(let address):
            return UInt32(bigEndian: address.sin_addr.s_addr) >> 24 == 127
        case .v6(let address):
            return withUnsafeBytes(of: address.sin6_addr) { bytes in
                bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1
            }
        }
    }

    /// The size of the address `withSockaddr` passes.
    var length: socklen_t {
        switch storage {
        case .v4: socklen_t(MemoryLayout<sockaddr_in>.size)
        case .v6: socklen_t(MemoryLayout<sockaddr_in6>.size)
        }
    }

    func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>) -> Result) -> Result {
        switch storage {
        case .v4(var address):
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        case .v6(var address):
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
    }
}
