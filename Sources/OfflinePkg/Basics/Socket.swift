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

    /// `fcntl(F_SETPIPE_SZ)`: asks for a pipe of `bytes` capacity; the capacity given (at least
    /// `bytes`), or -1 and `errno` (EPERM past `/proc/sys/fs/pipe-max-size` for an unprivileged user).
    @discardableResult
    package static func setPipeCapacity(_ descriptor: Int32, _ bytes: Int32) -> Int32 {
        csystemshims_set_pipe_capacity(descriptor, bytes)
    }

    /// `fcntl(F_GETPIPE_SZ)`: a pipe's capacity in bytes, or -1.
    package static func pipeCapacity(_ descriptor: Int32) -> Int32 { csystemshims_pipe_capacity(descriptor) }
}
