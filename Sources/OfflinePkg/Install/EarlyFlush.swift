import Dispatch
import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A flush of the file system holding a staging tree, started while the tree is still being written and
/// waited for before the tree is staged. The writeback of a large tree is a kernel thread's work (the
/// creates leave each file's blocks unallocated until then); started as soon as the unpacker has read
/// its archive to the end (the lanes still hold up to 1 MiB each to write), it runs beside the lanes
/// instead of after them, and the commit's own flush finds little left to write.
///
/// `syncfs` writes every dirty page of the file system, so it may start only once nothing of the sync
/// that is meant to be dropped is dirty there: the installer deletes the verified download first, and
/// flushes early only in a sync of one package (no other download on disk) into a store that holds
/// nothing (no written file is about to be swapped for a held copy); the lanes link a file that repeats
/// another of the tree as they write it (`RepeatedFiles`), not at staging.
final class EarlyFlush: Sendable {
    private let folder: String
    private let finished = DispatchGroup()
    private let failure = Mutex<OfflinePkgError?>(nil)

    /// A flush of the file system holding `folder` (not started).
    init(of folder: String) { self.folder = folder }

    /// Starts the flush on a thread of its own; called once. Where no thread can be made
    /// (`EAGAIN` at a process or thread limit), nothing starts and the commit's flush does it all:
    /// Foundation's `Thread` ignores that failure, and `wait` would then wait for ever.
    func start() {
        finished.enter()
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        guard pthread_create(&thread, nil, runEarlyFlush, context) == 0 else {
            Unmanaged<EarlyFlush>.fromOpaque(context).release()
            finished.leave()
            return
        }
        pthread_detach(thread)
    }

    fileprivate func run() {
        do { try FileSystem.syncFileSystem(containing: folder) } catch {
            let reported = error as? OfflinePkgError ?? .io(path: folder, operation: "syncfs", Errno(EIO))
            failure.withLock { $0 = reported }
        }
        finished.leave()
    }

    /// Waits for a started flush to end and throws its failure: a writeback error is reported once, to
    /// the descriptor of the flush that met it, so the commit's later flush would not see it. Returns at
    /// once when the flush never started.
    func wait() throws {
        finished.wait()
        if let failure = failure.withLock({ $0 }) { throw failure }
    }
}

// The flush thread's body: a plain function, as pthread_create takes a C function pointer.
private func runEarlyFlush(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    Unmanaged<EarlyFlush>.fromOpaque(context!).takeRetainedValue().run()
    return nil
}
