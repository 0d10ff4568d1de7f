internal import CSystemShims

#if canImport(Glibc)
import Glibc
#endif

/// Socket calls the server needs that Swift's Glibc module does not show.
package enum Socket {
    /// `accept4(2)` with `SOCK_CLOEXEC`: the accepted socket is close-on-exec from its first moment, so
    /// a process the host starts meanwhile never inherits a client connection. -1 and `errno` on failure.
    package static func acceptClosingOnExec(
        _ listener: Int32, _ address: UnsafeMutablePointer<sockaddr>, _ length: UnsafeMutablePointer<socklen_t>
    ) -> Int32 {
        csystemshims_accept_cloexec(listener, address, length)
    }
}
