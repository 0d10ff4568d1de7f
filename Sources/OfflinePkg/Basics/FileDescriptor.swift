#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A thin, copyable wrapper over an open file descriptor in the style of swift-system.
/// Ownership is explicit: whoever opens one closes it, usually through `closeAfter`.
package struct FileDescriptor: Sendable {
    package let rawValue: Int32

    package init(rawValue: Int32) { self.rawValue = rawValue }

    package static func open(
        _ path: String, _ flags: Int32, mode: mode_t = 0o600
    ) throws -> FileDescriptor {
        do {
            let fd = try valueOrErrno { Glibc.open(path, flags | O_CLOEXEC, mode) }
            return FileDescriptor(rawValue: fd)
        } catch {
            throw OfflinePkgError.io(path: path, operation: "open", error)
        }
    }

    package func close() { _ = Glibc.close(rawValue) }

    /// Runs `body` and closes the descriptor afterwards, whether it threw or not.
    package func closeAfter<R, E: Error>(_ body: (FileDescriptor) throws(E) -> R) throws(E) -> R {
        defer { close() }
        return try body(self)
    }

    /// The most one `write(2)` is given. Linux (ext4 with large folios) backs a larger write with
    /// high-order page-cache folios, whose allocation and first fill can cost several times the system
    /// time per byte of 64 KiB pieces (compare `dd bs=256K` with `bs=64K`); a piece costs one syscall.
    package static let writeLimit = 64 << 10

    /// Writes all of `buffer`, looping over short writes, `writeLimit` bytes a call.
    package func writeAll(_ buffer: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < buffer.count {
            do {
                let written = try valueOrErrno {
                    Glibc.write(rawValue, buffer.baseAddress! + offset, min(buffer.count - offset, Self.writeLimit))
                }
                offset += written
            } catch {
                throw OfflinePkgError.io(path: path, operation: "write", error)
            }
        }
    }

    package func writeAll(_ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { (buffer) throws in try writeAll(buffer, path: path) }
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer, path: String) throws -> Int {
        do {
            return try valueOrErrno { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
        } catch {
            throw OfflinePkgError.io(path: path, operation: "read", error)
        }
    }

    package func sync(path: String) throws {
        do { _ = try valueOrErrno { fsync(rawValue) } } catch { throw OfflinePkgError.io(path: path, operation: "fsync", error) }
    }

    package func truncate(to length: Int64, path: String) throws {
        do { _ = try valueOrErrno { ftruncate(rawValue, off_t(length)) } } catch {
            throw OfflinePkgError.io(path: path, operation: "truncate", error)
        }
    }

    package func seek(to offset: Int64, path: String) throws {
        do { _ = try valueOrErrno { lseek(rawValue, off_t(offset), SEEK_SET) } } catch {
            throw OfflinePkgError.io(path: path, operation: "seek", error)
        }
    }
}
