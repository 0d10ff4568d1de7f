internal import CSystemShims

#if canImport(Glibc)
import Glibc
#endif

/// Whose socket the other end of an accepted loopback TCP connection is (docs/protocol.md#neighbours-on-the-device). TCP carries no credentials, but both ends of a loopback connection are sockets of this
/// machine, and the kernel knows who made each: its socket diagnostics (`NETLINK_SOCK_DIAG`, what `ss
/// -e` shows) look one up by its addresses; where that is missing, `/proc/net/tcp` and `tcp6` list the
/// same. A socket's owner is the user that created it and never changes, so one look per connection,
/// when it is accepted, holds for all its requests.
///
/// One thread asks at a time (the server's accepting thread): the netlink socket is not shared.
package final class SocketOwners: Sendable {
    private let diag: Int32

    /// Opens the kernel's socket diagnostics; throws when neither they nor `/proc/net/tcp` can be
    /// read, since then no connection could be told apart.
    package init() throws {
        diag = csystemshims_sock_diag_open()
        if diag < 0 && access("/proc/net/tcp", R_OK) != 0 {
            throw OfflinePkgError.unavailable(
                "cannot tell which user a loopback connection comes from: no NETLINK_SOCK_DIAG (\(Errno.current)) and no /proc/net/tcp"
            )
        }
    }

    deinit { if diag >= 0 { close(diag) } }

    /// The uid that owns the other end of the connected TCP socket `socket`, or nil when it cannot be
    /// known: the peer is on another machine, or closed its end before the look (a socket no process
    /// holds has no owner worth trusting: the kernel reports such lingering sockets as root's).
    package func owner(ofPeerOf socket: Int32) -> uid_t? {
        var peer = sockaddr_storage()
        var local = sockaddr_storage()
        var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var localLength = peerLength
        let named = withUnsafeMutablePointer(to: &peer) { peerPointer in
            withUnsafeMutablePointer(to: &local) { localPointer in
                peerPointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { peerAddress in
                    localPointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { localAddress in
                        getpeername(socket, peerAddress, &peerLength) == 0 && getsockname(socket, localAddress, &localLength) == 0
                    }
                }
            }
        }
        guard named else { return nil }
        return owner(peer: peer, local: local)
    }

    /// The same for a connection whose two addresses the caller holds already: `peer` as `accept`
    /// gave it, `local` the address its listener is bound to (a listener bound to one address, as a
    /// loopback server's is, accepts only connections to it). That spares the two calls which would
    /// ask the kernel for them again, a fifth of what a look costs. The socket is looked up by both
    /// addresses and ports: a wrong `local` finds no socket (nil), never another one's owner.
    package func owner(peer: sockaddr_storage, local: sockaddr_storage) -> uid_t? {
        if diag >= 0 {
            var (peer, local) = (peer, local)
            var uid: UInt32 = 0
            var inode: UInt = 0
            if csystemshims_sock_diag_tcp_owner(diag, &peer, &local, &uid, &inode) == 0 { return inode == 0 ? nil : uid }
            // Not found is the kernel's answer; anything else (no inet_diag module, a sandbox) asks /proc.
            if errno == ENOENT { return nil }
        }
        return Self.ownerFromProc(peer: peer, local: local)
    }

    /// The same answer from `/proc/net/tcp` or `tcp6`: the line whose local address is the peer's and
    /// whose remote address is ours; its uid, unless its inode is 0 (a socket no process holds).
    static func ownerFromProc(peer: sockaddr_storage, local: sockaddr_storage) -> uid_t? {
        guard let wanted = procColumns(peer), let remote = procColumns(local) else { return nil }
        let file = peer.ss_family == sa_family_t(AF_INET) ? "/proc/net/tcp" : "/proc/net/tcp6"
        guard let bytes = try? FileSystem.read(file, limit: 64 << 20) else { return nil }
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 9, fields[1].uppercased() == wanted, fields[2].uppercased() == remote else { continue }
            guard let uid = uid_t(fields[7]), fields[9] != "0" else { return nil }
            return uid
        }
        return nil
    }

    /// An address as `/proc/net/tcp` prints it: each 32-bit word of the address as the machine holds it,
    /// in hex, then `:` and the port in hex (`0100007F:1F90` for 127.0.0.1:8080 on x86).
    static func procColumns(_ address: sockaddr_storage) -> String? {
        func hex(_ value: UInt32, width: Int) -> String {
            let text = String(value, radix: 16, uppercase: true)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        let family = Int32(address.ss_family)
        return withUnsafeBytes(of: address) { raw -> String? in
            switch family {
            case AF_INET:
                let v4 = raw.load(as: sockaddr_in.self)
                return hex(v4.sin_addr.s_addr, width: 8) + ":" + hex(UInt32(UInt16(bigEndian: v4.sin_port)), width: 4)
            case AF_INET6:
                let v6 = raw.load(as: sockaddr_in6.self)
                let words = withUnsafeBytes(of: v6.sin6_addr) { bytes in
                    (0..<4).map { bytes.load(fromByteOffset: $0 * 4, as: UInt32.self) }
                }
                return words.map { hex($0, width: 8) }.joined() + ":" + hex(UInt32(UInt16(bigEndian: v6.sin6_port)), width: 4)
            default:
                return nil
            }
        }
    }
}
