internal import CSystemShims

#if canImport(Glibc)
import Glibc
#endif

/// Socket and pipe calls the server needs that Swift's Glibc module does not show.
package enum Socket {
    /// `accept4(2)` with `SOCK_CLOEXEC`: the accepted socket is close-on-exec from its first moment, so
    /// a process the host starts meanwhile never inherits a client connection. -1 and `errno` on failure.
    package static func acceptClosingOnExec(
        _ listener: Int32, _ address: UnsafeMutablePointer<sockaddr>, _ length: UnsafeMutablePointer<socklen_t>
    ) -> Int32 {
        csystemshims_accept_cloexec(listener, address, length)
    }

    /// `setsockopt(TCP_CONGESTION)`: the congestion control `name` for `socket` (a listening socket's
    /// passes to the connections it accepts). False when the kernel refuses it: not built, or not in
    /// `/proc/sys/net/ipv4/tcp_allowed_congestion_control` for an unprivileged process (`reno` always is).
    package static func setCongestionControl(_ socket: Int32, _ name: String) -> Bool {
        name.withCString { setsockopt(socket, Int32(IPPROTO_TCP), TCP_CONGESTION, $0, socklen_t(strlen($0))) == 0 }
    }

    /// `fcntl(F_SETPIPE_SZ)`: asks for a pipe of `bytes` capacity; the capacity given (at least
    /// `bytes`), or -1 and `errno` (EPERM past `/proc/sys/fs/pipe-max-size` for an unprivileged user).
    @discardableResult
    package static func setPipeCapacity(_ descriptor: Int32, _ bytes: Int32) -> Int32 {
        csystemshims_set_pipe_capacity(descriptor, bytes)
    }

    /// `fcntl(F_GETPIPE_SZ)`: a pipe's capacity in bytes, or -1.
    package static func pipeCapacity(_ descriptor: Int32) -> Int32 { csystemshims_pipe_capacity(descriptor) }
}
