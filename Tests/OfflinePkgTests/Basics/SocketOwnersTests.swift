import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `SocketOwners` names the user at the other end of a loopback connection, by the kernel's socket
/// diagnostics and by `/proc/net/tcp{,6}` alike. (Another user's connection: `NeighbourConnectionTests`.)
@Suite struct SocketOwnersTests {
    /// An accepted loopback connection of this process: the listener, the client and the accepted end.
    final class Connection {
        private var sockets: [Int32]
        var accepted: Int32 { sockets[2] }
        /// The client's address as `accept` gave it, and the listener's (the accepted end's own).
        let peer: sockaddr_storage
        let listenerAddress: sockaddr_storage

        /// The client closes its end.
        func closeClient() {
            close(sockets[1])
            sockets[1] = -1
        }

        init(ipv6: Bool) throws {
            let family = ipv6 ? AF_INET6 : AF_INET
            let listener = socket(family, Int32(SOCK_STREAM.rawValue), 0)
            var storage = sockaddr_storage()
            var length: socklen_t
            if ipv6 {
                var address = sockaddr_in6()
                address.sin6_family = sa_family_t(AF_INET6)
                address.sin6_addr = in6addr_loopback
                length = socklen_t(MemoryLayout<sockaddr_in6>.size)
                withUnsafeBytes(of: address) { raw in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: raw) } }
            } else {
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
                length = socklen_t(MemoryLayout<sockaddr_in>.size)
                withUnsafeBytes(of: address) { raw in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: raw) } }
            }
            let bound = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                    bind(listener, pointer, length) == 0 && listen(listener, 4) == 0
                        && getsockname(listener, pointer, &length) == 0
                }
            }
            guard bound else { throw TestSupportError("listen on loopback: \(errno)") }
            let client = socket(family, Int32(SOCK_STREAM.rawValue), 0)
            let connected = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) == 0 }
            }
            guard connected else { throw TestSupportError("connect: \(errno)") }
            var peer = sockaddr_storage()
            var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let accepted = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(listener, $0, &peerLength) }
            }
            guard accepted >= 0 else { throw TestSupportError("accept: \(errno)") }
            sockets = [listener, client, accepted]
            self.peer = peer
            listenerAddress = storage
        }

        deinit { for socket in sockets where socket >= 0 { close(socket) } }
    }

    @Test(arguments: [false, true])
    func theOwnerOfALoopbackPeerIsThisProcesssUser(ipv6: Bool) throws {
        let connection = try Connection(ipv6: ipv6)
        #expect(try SocketOwners().owner(ofPeerOf: connection.accepted) == geteuid())
        // The /proc reading gives the same answer.
        var peer = sockaddr_storage()
        var local = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &peer) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(connection.accepted, $0, &length) }
        }
        length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(connection.accepted, $0, &length) }
        }
        #expect(SocketOwners.ownerFromProc(peer: peer, local: local) == geteuid())
    }

    /// The server's look: the peer's address from `accept`, its own end the listener's address, with no
    /// call to ask the kernel for either again. Both ports name the socket: with the listener's port one
    /// off, the kernel finds no such connection, and there is no owner.
    @Test(arguments: [false, true])
    func theOwnerFromAcceptsAddressAndTheListenersIsThisProcesssUser(ipv6: Bool) throws {
        let connection = try Connection(ipv6: ipv6)
        let owners = try SocketOwners()
        #expect(owners.owner(peer: connection.peer, local: connection.listenerAddress) == geteuid())
        var elsewhere = connection.listenerAddress
        withUnsafeMutableBytes(of: &elsewhere) { bytes in
            let port = UInt16(bigEndian: bytes.load(fromByteOffset: 2, as: UInt16.self))
            bytes.storeBytes(of: (port &+ 1).bigEndian, toByteOffset: 2, as: UInt16.self)
        }
        #expect(owners.owner(peer: connection.peer, local: elsewhere) == nil)
    }

    /// A peer that closed its end before the look has no owner: the kernel keeps a closed socket as
    /// root's, and that must never pass for root.
    @Test func aPeerThatClosedItsEndHasNoOwner() throws {
        let connection = try Connection(ipv6: false)
        connection.closeClient()
        usleep(50_000)
        #expect(try SocketOwners().owner(ofPeerOf: connection.accepted) == nil)
    }
}
