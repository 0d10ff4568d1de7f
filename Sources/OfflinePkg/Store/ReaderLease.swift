import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A reader process's claim on the trees it answers from: `leases/<pid>` lists them, one per line, and
/// the reader holds a shared `flock` on it while it lives. Garbage collection keeps every tree a live
/// lease names; a lease whose lock it can take belongs to a dead process and is removed.
package final class ReaderLease: Sendable {
    private let path: String
    private let descriptor: FileDescriptor
    private let lastWritten = Mutex<[String]>([])

    package init(layout: CacheLayout) throws {
        path = layout.lease(pid: getpid())
        descriptor = try FileDescriptor.open(path, O_RDWR | O_CREAT, mode: 0o644)
        if flock(descriptor.rawValue, LOCK_SH) != 0 {
            descriptor.close()
            throw OfflinePkgError.io(path: path, operation: "flock", Errno.current)
        }
    }

    deinit {
        unlink(path)
        descriptor.close()
    }

    /// Replaces the list of leased trees.
    package func hold(_ trees: [String]) {
        lastWritten.withLock { written in
            guard written != trees else { return }
            written = trees
            let bytes = Array((trees.joined(separator: "\n") + "\n").utf8)
            // pwrite then truncate: a collector reading mid-update sees a superset or a torn line; it
            // treats any unreadable lease as "keep everything", so neither can cost a live tree.
            _ = bytes.withUnsafeBytes { pwrite(descriptor.rawValue, $0.baseAddress, $0.count, 0) }
            _ = ftruncate(descriptor.rawValue, off_t(bytes.count))
        }
    }

    /// The trees named by live leases, or nil when some lease could not be read (keep everything then).
    package static func liveTrees(layout: CacheLayout) -> Set<String>? {
        var trees = Set<String>()
        for name in FileSystem.contents(of: layout.leases) {
            let path = layout.leases + "/" + name
            guard let fd = try? FileDescriptor.open(path, O_RDONLY) else { continue }
            defer { fd.close() }
            if flock(fd.rawValue, LOCK_EX | LOCK_NB) == 0 {
                // Nobody holds it: the reader is gone.
                unlink(path)
                continue
            }
            guard let bytes = try? FileSystem.read(path, limit: 16 << 20) else { return nil }
            for line in bytes.split(separator: 0x0a) { trees.insert(String(decoding: line, as: UTF8.self)) }
        }
        return trees
    }
}
