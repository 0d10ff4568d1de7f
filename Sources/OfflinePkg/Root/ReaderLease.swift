import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A reader's claim on the trees it answers from: `leases/<pid>-<random>` (one per open store, so two
/// stores in one process never overwrite each other's list) lists them, one per line, and the reader
/// holds a shared `flock` on it while it lives. Garbage collection keeps every tree a live lease names;
/// a lease whose lock it can take belongs to a dead reader and is removed.
///
/// A lease is born under a hidden name and renamed into place only once locked: otherwise a collector
/// could find it in the instant between `open` and `flock`, take it for dead, and unlink it.
package final class ReaderLease: Sendable {
    private let path: String
    private let descriptor: FileDescriptor
    private let lastWritten = Mutex<[String]>([])

    package init(layout: CacheLayout) throws {
        var attempt = 0
        while true {
            let name = "\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let hidden = layout.lease(name, hidden: true)
            let fd = try FileDescriptor.open(hidden, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
            if flock(fd.rawValue, LOCK_SH) != 0 {
                fd.close()
                unlink(hidden)
                throw OfflinePkgError.io(path: hidden, operation: "flock", Errno.current)
            }
            let final = layout.lease(name)
            if rename(hidden, final) == 0 {
                path = final
                descriptor = fd
                return
            }
            // A collector removed the hidden file before our lock landed: start again.
            fd.close()
            attempt += 1
            if attempt == 5 { throw OfflinePkgError.io(path: final, operation: "rename", Errno.current) }
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
            let path = layout.lease(name)
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
