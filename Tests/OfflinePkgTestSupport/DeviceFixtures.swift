import Foundation
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Whether two folders hold the same files with the same bytes (`diff -r`).
package func sameFiles(_ a: String, _ b: String) -> Bool {
    (try? shell("diff -r '\(a)' '\(b)'")) != nil
}

/// Deterministic, incompressible content: what a file of a given version holds.
package func content(_ seed: String, size: Int) -> [UInt8] {
    var out = [UInt8]()
    var block = SHA256.hash(Array(seed.utf8)).bytes
    while out.count < size {
        out.append(contentsOf: block)
        block = SHA256.hash(block).bytes
    }
    return Array(out.prefix(size))
}

/// Collects sync events from the sync's threads.
package final class EventLog: Sendable {
    package init() {}
    private let events = Mutex<[SyncEvent]>([])
    package func append(_ event: SyncEvent) { events.withLock { $0.append(event) } }
    package var all: [SyncEvent] { events.withLock { $0 } }

    package var deltaFailures: [OfflinePkgError] {
        all.compactMap { if case .deltaFailed(_, _, let error) = $0 { error } else { nil } }
    }
}

package func inode(_ path: String) -> UInt64? {
    var info = stat()
    return lstat(path, &info) == 0 ? UInt64(info.st_ino) : nil
}
