internal import CMicroHTTPD
import Foundation
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The listening socket, and the one thread that accepts on it and hands each connection to MHD
/// (`MHD_add_connection`), which gives it to a pool thread by the socket's number: consecutive
/// connections go to the threads in turn.
///
/// Left to MHD, every pool thread polls the listening socket and whichever wakes first takes the
/// connection: under load one thread can end up holding two or three times the connections of
/// another (measured: 12 and 41 of wrk's 64), and those connections wait on it while the other idles
/// — the server's tail latency (docs/benchmarks.md, "Serve under load"). Accepting here also lets a
/// connection past `--max-connections` be answered `503` and closed at once, where MHD would leave it
/// unaccepted in the kernel's queue, connected but unanswered, until a held connection closes.
///
/// The daemon connections go to is swapped when `serve --tls` presents a re-issued certificate: the
/// socket stays, so no connection is refused during the hand-over.
final class ConnectionAcceptor: Sendable {
    let socket: Int32
    /// The bound port (the kernel's pick for port 0).
    let port: UInt16
    /// The daemon new connections go to; held while one is handed over, so a retired daemon gets
    /// none after `hand(to:)` returns.
    private struct Target: @unchecked Sendable {
        // @unchecked: MHD's daemon handle, used only under the mutex and valid until the daemon is
        // stopped, which the server does only after moving the acceptor off it or stopping it.
        var daemon: OpaquePointer?
    }
    private let target = Mutex(Target(daemon: nil))
    private let started = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let refusal: [UInt8]

    /// Binds and listens on `address`. Throws the bind or listen error.
    init(address: SocketAddress, backlog: Int32, refusal text: String) throws {
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        let socket = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw Errno(errno) }
        var one: Int32 = 1
        setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let length = socklen_t(address.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        guard address.withSockaddr({ bind(socket, $0, length) }) == 0, listen(socket, backlog) == 0 else {
            let code = errno
            close(socket)
            throw Errno(code)
        }
        var bound = sockaddr_in6()
        var boundLength = socklen_t(MemoryLayout<sockaddr_in6>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &boundLength) }
        }
        // sin_port and sin6_port sit at the same offset.
        port = UInt16(bigEndian: bound.sin6_port)
        self.socket = socket
        refusal = Array(
            """
            HTTP/1.1 503 Service Unavailable\r
            Content-Type: text/plain; charset=utf-8\r
            Content-Length: \(text.utf8.count)\r
            Retry-After: 1\r
            Cache-Control: no-store\r
            Connection: close\r
            \r
            \(text)
            """.utf8)
    }

    /// Starts the accepting thread, handing connections to `daemon`. `admits` says whether one more
    /// connection may be held; when it says no, the connection is answered 503 and closed.
    func start(daemon: OpaquePointer, admits: @escaping @Sendable () -> Bool) {
        target.withLock { $0.daemon = daemon }
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [self] in
            defer { finished.signal() }
            while !stopping.load(ordering: .acquiring) {
                var address = sockaddr_storage()
                var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
                let connection = withUnsafeMutablePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        cmicrohttpd_accept(socket, $0, &length)
                    }
                }
                guard connection >= 0 else {
                    switch errno {
                    case EINTR, ECONNABORTED, EPROTO: continue
                    // Out of descriptors or memory for a moment: held connections will close.
                    case EMFILE, ENFILE, ENOBUFS, ENOMEM: usleep(10_000); continue
                    // Shut down by `stop`.
                    default: return
                    }
                }
                guard admits() else {
                    refuse(connection)
                    continue
                }
                target.withLock { target in
                    // MHD closes the socket itself when it cannot take it.
                    _ = withUnsafePointer(to: &address) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            MHD_add_connection(target.daemon, connection, $0, length)
                        }
                    }
                }
            }
        }
        thread.name = "offlinepkg.serve-accept"
        thread.start()
    }

    /// New connections go to `daemon` from now on.
    func hand(to daemon: OpaquePointer) { target.withLock { $0.daemon = daemon } }

    /// Stops accepting and closes the socket; returns once the thread has finished (connections
    /// waiting in the kernel's queue are reset by the close).
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // A listening socket shut down makes the blocked accept() return (EINVAL).
        shutdown(socket, Int32(SHUT_RDWR))
        if started.load(ordering: .acquiring) { finished.wait() }
        close(socket)
    }

    /// The 503 goes out at once, then a FIN; what the client has already sent is read away first,
    /// since closing a socket with unread bytes resets the connection and the client could lose
    /// the answer.
    private func refuse(_ connection: Int32) {
        _ = refusal.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        shutdown(connection, Int32(SHUT_WR))
        var scratch = [UInt8](repeating: 0, count: 4096)
        var reads = 0
        while reads < 16, recv(connection, &scratch, scratch.count, Int32(MSG_DONTWAIT)) > 0 { reads += 1 }
        close(connection)
    }
}
