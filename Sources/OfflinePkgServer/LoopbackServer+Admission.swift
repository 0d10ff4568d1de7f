import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

extension LoopbackServer {
    /// Who may talk to the server (docs/protocol.md#neighbours-on-the-device). A loopback port is open to
    /// every process of the device, other users' and other apps' among them (Android gives each app a
    /// uid of its own): a connection whose other end belongs to another user than the server's, and
    /// not to root, is closed before a byte is read, unless `users` names its user.
    public struct Admission: Sendable {
        /// Users admitted besides the server's own and root (`serve --allow-user`).
        public var users: Set<uid_t>
        /// Called on the accepting thread for each connection refused, with the uid of its other end
        /// (nil when the kernel could not say: a peer already gone).
        public var refused: (@Sendable (_ uid: uid_t?) -> Void)?

        public init(users: Set<uid_t> = [], refused: (@Sendable (_ uid: uid_t?) -> Void)? = nil) {
            self.users = users
            self.refused = refused
        }
    }
}

/// The admission check of each accepted connection, made once, on the accepting thread, before the
/// connection reaches a lane: a refused one never costs a request's work, and an admitted one nothing
/// more per request.
final class PeerAdmission: Sendable {
    private let owners: SocketOwners
    private let admitted: Set<uid_t>
    private let refused: (@Sendable (uid_t?) -> Void)?
    /// Connections closed unanswered so far.
    let refusedCount = Atomic<Int>(0)

    init(_ admission: LoopbackServer.Admission) throws {
        owners = try SocketOwners()
        admitted = admission.users.union([geteuid(), 0])
        refused = admission.refused
    }

    /// Whether the connection `socket`, from `peer` (as `accept` gave it) to `local` (the address its
    /// listener is bound to), may be served; a refused one is reset (no lingering close, so a flood of
    /// them leaves no TIME_WAIT behind) and closed.
    func admit(_ socket: Int32, peer: sockaddr_storage, local: sockaddr_storage) -> Bool {
        let owner = owners.owner(peer: peer, local: local)
        if let owner, admitted.contains(owner) { return true }
        var reset = linger(l_onoff: 1, l_linger: 0)
        setsockopt(socket, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
        close(socket)
        refusedCount.add(1, ordering: .relaxed)
        refused?(owner)
        return false
    }
}
