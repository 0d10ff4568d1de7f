#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A POSIX error number, printed with its `strerror` text.
public struct Errno: Error, Equatable, CustomStringConvertible, Sendable {
    package let rawValue: Int32

    package init(_ rawValue: Int32) { self.rawValue = rawValue }

    package static var current: Errno { Errno(errno) }

    public var description: String { String(cString: strerror(rawValue)) }

    package static let interrupted = Errno(EINTR)
    package static let noEntry = Errno(ENOENT)
    package static let wouldBlock = Errno(EWOULDBLOCK)
}

/// Runs a system call and turns its `-1` into a thrown `Errno`, retrying on `EINTR` when asked.
/// Every syscall in this module goes through here, so error handling reads the same everywhere.
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
