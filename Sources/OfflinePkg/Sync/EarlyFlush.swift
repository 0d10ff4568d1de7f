import Foundation
import Synchronization

/// A flush of the file system holding a staging tree, started while the tree is still being written and
/// waited for before the tree is staged. The writeback of a 10k-file tree is a kernel thread's work of
/// about 120 ms (the creates leave each file's blocks unallocated until then); started as soon as the
/// unpacker has read its archive to the end (the lanes still write about the last 8 MiB handed to them),
/// it runs beside the lanes instead of after them, and the commit's own flush finds little left to write
/// (docs/benchmarks.md, "Wave 15").
///
/// `syncfs` writes every dirty page of the file system, so it may start only once nothing else of the
/// sync is dirty there that is meant to be dropped: the installer deletes the verified download first,
/// and flushes early only in a sync of one package (no other download on disk) into a store that holds
/// nothing (no written file is about to be swapped for a held copy, which a flush would write for nothing).
final class EarlyFlush: Sendable {
    private let folder: String
    private let started = Atomic(false)
    private let finished = DispatchGroup()
    private let failure = Mutex<OfflinePkgError?>(nil)

    /// A flush of the file system holding `folder` (not started).
    init(of folder: String) { self.folder = folder }

    /// Starts the flush on a thread of its own; a second call does nothing.
    func start() {
        guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        finished.enter()
        let thread = Thread { [self] in
            do { try FileSystem.syncFileSystem(containing: folder) } catch {
                let reported = error as? OfflinePkgError ?? .io(path: folder, operation: "syncfs", Errno(EIO))
                failure.withLock { $0 = reported }
            }
            finished.leave()
        }
        thread.stackSize = 256 << 10
        thread.start()
    }

    /// Waits for a started flush to end and throws its failure: a writeback error is reported once, to
    /// the descriptor of the flush that met it, so the commit's later flush would not see it. Returns at
    /// once when the flush never started.
    func wait() throws {
        finished.wait()
        if let failure = failure.withLock({ $0 }) { throw failure }
    }
}
