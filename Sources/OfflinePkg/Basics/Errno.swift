#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A POSIX error number, printed with its `strerror` text. Public because `OfflinePkgError.io` carries
/// one: a host can tell, say, `ENOSPC` from `EACCES` by its number.
public struct Errno: Error, Equatable, CustomStringConvertible, Sendable {
    public let rawValue: Int32

    package init(_ rawValue: Int32) { self.rawValue = rawValue }

    package static var current: Errno { Errno(errno) }

    public var description: String { String(cString: strerror(rawValue)) }

    package static let interrupted = Errno(EINTR)
    package static let noEntry = Errno(ENOENT)
    package static let wouldBlock = Errno(EWOULDBLOCK)
}

/// Runs a system call and turns its `-1` into a thrown `Errno`, retrying on `EINTR` when asked. The
/// `FileDescriptor` wrappers and a few others use it; most call sites check a result themselves
/// and throw `OfflinePkgError.io` with `Errno.current`, which names the path and the operation.
@inline(__always)
package func valueOrErrno<I: FixedWidthInteger>(
    retryOnInterrupt: Bool = true, _ body: () -> I
) throws(Errno) -> I {
    while true {
        let result = body()
        if result != -1 { return result }
        let error = Errno.current
        if retryOnInterrupt && error == .interrupted { continue }
        throw error
    }
}
