import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The file-system end of an unpack, on threads of its own: the reading thread decompresses and checks
/// every entry, then hands the checked bytes to a lane, which creates, writes, hashes and closes the
/// file through a `TreeWriter` of its own. Creating a file costs more than decompressing it (on ext4
/// most of a small file's time is the inode allocation of `openat`), and creations in different folders
/// run side by side, so the files go to a lane by their folder: a lane per core unpacks a package of many
/// small files in a fraction of one thread's time. A folder goes to the lane with the fewest bytes
/// queued when its first entry is read, and stays there: a run of folders never lands on one lane while
/// the other waits with nothing to write (hashing folders to lanes left a 10k-file sync's lanes idle
/// some fifty times, the reader held up on the full one).
///
/// Nothing changes what is accepted: every rule is applied on the reading thread before a byte is
/// handed over, and the lanes only write what was checked. Each lane's queue is bounded in bytes, so an
/// unpack's memory stays a few MiB whatever the archive; the first failure of any lane stops the reader
/// at its next hand-over and is the unpack's error.
///
/// With the target `.hashOnly` (`ArchiveUnpacker.verify`) the lanes take the same items, hash them
/// with the same code and keep the same results, and create nothing: the publisher's check of what
/// devices would refuse costs no file of its own.
final class WriterLanes: @unchecked Sendable {
    // The state below is guarded by `condition`; each lane's `results` is its thread's alone until `finish`.
    private let condition = ThreadCondition()
    private var lanes: [Lane]
    private var failure: (any Error)?
    private var threadsRunning: Int
    private let archiveName: String
    private let bounds: UnpackBounds
    /// Called on the lane with each file it finished (its writer, path, sha256 and size): the content store's
    /// insert (`ContentStore.keepFile`), which links the new inode to its content name.
    private let keepFile: ((TreeWriter, PackagePath, TreeFile) throws -> Void)?
    /// Called on the lane with a whole file's path, sha256 and size before it is created: true when the
    /// file was made a link to bytes the root already holds, so it is not written at all (`ArchiveUnpacker.reuseFile`).
    private let reuseFile: ((TreeWriter, PackagePath, TreeFile) throws -> Bool)?

    /// Where the lanes put what they are handed.
    enum Target {
        /// Each file created below `root` by a `TreeWriter` of its lane's (`replacesFiles` as it takes it).
        case tree(root: String, replacesFiles: Bool)
        /// Nothing created: each file is hashed and let go.
        case hashOnly
    }

    /// What a lane is asked to do, in the order the archive lists it.
    enum Item {
        case folder(PackagePath, raw: PackagePath)
        /// A whole file, read before it was handed over (most files of a site).
        case file(PackagePath, raw: PackagePath, [UInt8])
        /// A file larger than `wholeFileLimit`: its bytes follow as `chunk`s, then `end`.
        case begin(PackagePath, raw: PackagePath)
        case chunk([UInt8])
        case end
    }

    /// Files up to this size are handed over whole; larger ones stream in pieces of this size.
    static let wholeFileLimit = 256 << 10
    /// Bytes queued per lane before the reader waits: bounds an unpack's memory. The reader waits until
    /// the lane has written half of them, so it is woken once per 256 KiB, not once per file taken. A
    /// deeper queue bought a 10k-file sync no time and held more memory (docs/design.md, "Memory").
    static let queueLimit = 512 << 10

    private final class Lane {
        /// Nil for the target `.hashOnly`.
        let writer: TreeWriter?
        init(writer: TreeWriter?) { self.writer = writer }
        var queue: [Item] = []
        var head = 0
        var queuedBytes = 0
        /// The lane waits for an item: the reader wakes it only then.
        var idle = false
        var results: [PackagePath: TreeFile] = [:]
        /// The file being streamed in pieces (`begin` ... `end`).
        var open: OpenFile?
    }

    /// A file of `begin` while its `chunk`s arrive.
    private struct OpenFile {
        /// Nil for the target `.hashOnly`.
        var file: TreeWriter.NewFile?
        var path: PackagePath
        var raw: PackagePath
        var hasher = SHA256()
        var size: Int64 = 0
    }

    private var closed = false
    /// The lane whose queue the reader waits to see drained to half (`queueLimit`): that lane alone wakes
    /// it, once. Every lane waking it at each item it took woke it some fifty times a wait for nothing,
    /// and each woken reader took the lock from the lanes.
    private var drainAwaited: Lane?
    /// The lane of each folder met so far, and the lane a new folder goes to when all queue alike: the
    /// reader's alone (`lane(for:)`), never the lanes'.
    private var folderLanes: [PackagePath: Int] = [:]
    private var nextFolderLane = 0
    /// With no lane threads (`count` 0) the reading thread writes each item as it hands it over.
    private let inline: Lane?

    /// Starts `count` lanes putting what they are handed to `target`; with `count` 0, no thread: every
    /// item is written by the caller of `send`. `keepFile` and `reuseFile` run for a `.tree` only.
    init(
        target: Target, count: Int, archiveName: String, bounds: UnpackBounds,
        keepFile: ((TreeWriter, PackagePath, TreeFile) throws -> Void)? = nil,
        reuseFile: ((TreeWriter, PackagePath, TreeFile) throws -> Bool)? = nil
    ) throws {
        self.archiveName = archiveName
        self.bounds = bounds
        self.keepFile = keepFile
        self.reuseFile = reuseFile
        let shownPath: String
        switch target {
        case .tree(let root, let replacesFiles):
            shownPath = root
            // Each lane opens the root before the first entry is read, so a missing staging folder fails here.
            lanes = try (0..<max(1, count)).map { _ in Lane(writer: try TreeWriter(root: root, replacesFiles: replacesFiles)) }
        case .hashOnly:
            shownPath = archiveName
            lanes = (0..<max(1, count)).map { _ in Lane(writer: nil) }
        }
        inline = count == 0 ? lanes[0] : nil
        threadsRunning = count
        for index in 0..<count {
            guard OSThread.start(name: "offlinepkg.lane", stackSize: 1 << 20, { [self] in run(lane: lanes[index]) }) else {
                // No thread to be had: the unpack fails at its first hand-over instead of waiting for ever.
                condition.lock()
                threadsRunning -= 1
                failure = failure ?? OfflinePkgError.io(path: shownPath, operation: "pthread_create", Errno(EAGAIN))
                condition.unlock()
                continue
            }
        }
    }

    /// The number of lanes for this machine: one per core, at least two (the reader and one lane
    /// already overlap), at most four (past that the folder locks of the file system serialise them).
    static var defaultCount: Int { min(4, max(2, ProcessInfo.processInfo.activeProcessorCount)) }

    /// The threads writing for this unpack (0: the reading thread writes).
    var threadCount: Int { inline == nil ? lanes.count : 0 }

    /// The lane of everything in `folder`: files of one folder stay in one lane, so its `TreeWriter`
    /// keeps that folder open and the archive's order within a folder is the order on disk. A folder
    /// met first goes to the lane with the fewest bytes queued, taking turns among lanes that queue
    /// alike (a lane keeping up queues nothing, yet is busy with the file it took). Called on the
    /// reading thread only.
    func lane(for folder: PackagePath) -> Int {
        if lanes.count == 1 { return 0 }
        if let known = folderLanes[folder] { return known }
        var emptiest = nextFolderLane
        condition.lock()
        for step in 1..<lanes.count {
            let index = (nextFolderLane + step) % lanes.count
            if lanes[index].queuedBytes < lanes[emptiest].queuedBytes { emptiest = index }
        }
        condition.unlock()
        folderLanes[folder] = emptiest
        nextFolderLane = (emptiest + 1) % lanes.count
        return emptiest
    }

    /// Queues `item` on lane `index`, waiting while the lane holds `queueLimit` bytes. Throws the first
    /// failure of any lane, or the unpack's deadline passing while it waits. With no lane threads, writes
    /// `item` now.
    func send(_ item: Item, to index: Int) throws {
        if let inline {
            do { try write(item, lane: inline) } catch {
                failure = failure ?? error
                throw error
            }
            return
        }
        condition.lock()
        defer { condition.unlock() }
        let lane = lanes[index]
        if lane.queuedBytes > Self.queueLimit {
            while failure == nil && lane.queuedBytes > Self.queueLimit / 2 {
                if let reason = bounds.exceeded(checkMemory: false) {
                    failure = OfflinePkgError.archiveRefused(archive: archiveName, entry: nil, reason: reason)
                    break
                }
                drainAwaited = lane
                condition.wait(seconds: 0.1)
            }
            drainAwaited = nil
        }
        if let failure { throw failure }
        lane.queue.append(item)
        lane.queuedBytes += item.bytes
        // Woken once: until it runs, the items that follow find it no longer idle.
        if lane.idle {
            lane.idle = false
            condition.broadcast()
        }
    }

    /// Waits for every lane to write what it was given, and returns each file written with its hash;
    /// throws the first failure of a lane instead.
    func finish() throws -> [PackagePath: TreeFile] {
        stop()
        if let failure { throw failure }
        var files = [PackagePath: TreeFile]()
        files.reserveCapacity(lanes.reduce(0) { $0 + $1.results.count })
        for lane in lanes { files.merge(lane.results) { first, _ in first } }
        return files
    }

    /// Closes the queues and waits for the lanes to end: after a failure on the reading thread, what was
    /// queued is still written (the caller removes the staging folder once no lane can create in it).
    func stop() {
        if let inline {
            inline.open?.file?.abandon()
            inline.open = nil
            return
        }
        condition.lock()
        closed = true
        condition.broadcast()
        while threadsRunning > 0 { condition.wait() }
        condition.unlock()
    }

    /// The next item of `lane`, or nil once the queues are closed and it is empty, or a lane failed.
    private func next(_ lane: Lane) -> Item? {
        condition.lock()
        defer { condition.unlock() }
        while lane.head == lane.queue.count && !closed && failure == nil {
            lane.idle = true
            condition.wait()
        }
        lane.idle = false
        guard failure == nil, lane.head < lane.queue.count else { return nil }
        let item = lane.queue[lane.head]
        // The slot lets go of the bytes now: a reader that keeps the queue from ever draining (a 1 GiB
        // file) would otherwise keep every piece it sent alive until the end of the file.
        lane.queue[lane.head] = .end
        lane.head += 1
        lane.queuedBytes -= item.bytes
        // Drop the taken slots once the queue has drained, or once they are many, so the array stays small.
        if lane.head == lane.queue.count {
            lane.queue.removeAll(keepingCapacity: true)
            lane.head = 0
        } else if lane.head >= 4096 {
            lane.queue.removeFirst(lane.head)
            lane.head = 0
        }
        if drainAwaited === lane && lane.queuedBytes <= Self.queueLimit / 2 {
            drainAwaited = nil
            condition.broadcast()
        }
        return item
    }

    private func run(lane: Lane) {
        do {
            while let item = next(lane) { try write(item, lane: lane) }
        } catch {
            condition.lock()
            if failure == nil { failure = error }
            condition.unlock()
        }
        lane.open?.file?.abandon()
        lane.open = nil
        condition.lock()
        threadsRunning -= 1
        condition.broadcast()
        condition.unlock()
    }

    private func write(_ item: Item, lane: Lane) throws {
        switch item {
        case .folder(let path, let raw):
            guard let writer = lane.writer else { return }
            do { try writer.makeFolder(path.string) } catch let conflict as TreeWriter.Conflict {
                throw refuse(raw, conflict.reason)
            }
        case .file(let path, let raw, let data):
            try checkBounds()
            // Hashed before it is created: a file whose bytes the root holds already becomes a link to
            // them, where writing a copy and then swapping it for the link would cost a create, its
            // writes and the copy's deletion (after which ext4 steps over the freed inode at every
            // later create of the sync).
            let hasher = SHA256()
            data.withUnsafeBytes { hasher.update($0) }
            let done = TreeFile(sha256: hasher.finalize().hex, size: Int64(data.count))
            guard let writer = lane.writer else {
                lane.results[path] = done
                return
            }
            if let reuseFile, try reuse(path, raw: raw, done, writer: writer, reuseFile) {
                lane.results[path] = done
                return
            }
            let file = try create(path, raw: raw, writer: writer)
            do { try data.withUnsafeBytes { try Self.write($0, to: file) } } catch {
                file.abandon()
                throw error
            }
            try file.close()
            try finished(path, done, lane: lane)
        case .begin(let path, let raw):
            try checkBounds()
            let file = try lane.writer.map { try create(path, raw: raw, writer: $0) }
            lane.open = OpenFile(file: file, path: path, raw: raw)
        case .chunk(let data):
            guard let open = lane.open else { return }
            try data.withUnsafeBytes { buffer in
                open.hasher.update(buffer)
                if let file = open.file { try Self.write(buffer, to: file) }
            }
            lane.open?.size += Int64(data.count)
        case .end:
            guard let open = lane.open else { return }
            lane.open = nil
            try open.file?.close()
            try finished(open.path, TreeFile(sha256: open.hasher.finalize().hex, size: open.size), lane: lane)
        }
    }

    private func finished(_ path: PackagePath, _ file: TreeFile, lane: Lane) throws {
        if let writer = lane.writer { try keepFile?(writer, path, file) }
        lane.results[path] = file
    }

    /// The unpack's deadline, checked as each file begins, whether or not it is written.
    private func checkBounds() throws {
        if let reason = bounds.exceeded(checkMemory: false) {
            throw OfflinePkgError.archiveRefused(archive: archiveName, entry: nil, reason: reason)
        }
    }

    private func reuse(
        _ path: PackagePath, raw: PackagePath, _ file: TreeFile, writer: TreeWriter,
        _ reuseFile: (TreeWriter, PackagePath, TreeFile) throws -> Bool
    ) throws -> Bool {
        do { return try reuseFile(writer, path, file) } catch let conflict as TreeWriter.Conflict {
            throw refuse(raw, conflict.reason)
        }
    }

    private func create(_ path: PackagePath, raw: PackagePath, writer: TreeWriter) throws -> TreeWriter.NewFile {
        // No early writeback here: `sync_file_range(SYNC_FILE_RANGE_WRITE)` per file tripled the
        // unpack's system time (one small write-out per file instead of the syncfs's merged one).
        do { return try writer.create(path.string) } catch let conflict as TreeWriter.Conflict {
            throw refuse(raw, conflict.reason)
        }
    }

    private static func write(_ buffer: UnsafeRawBufferPointer, to file: TreeWriter.NewFile) throws {
        do throws(Errno) { try file.descriptor.writeAll(buffer) } catch {
            throw OfflinePkgError.io(path: file.shownPath, operation: "write", error)
        }
    }

    private func refuse(_ entry: PackagePath, _ reason: String) -> OfflinePkgError {
        .archiveRefused(archive: archiveName, entry: entry, reason: reason)
    }
}

extension WriterLanes.Item {
    /// The bytes it holds, counted against `queueLimit`.
    var bytes: Int {
        switch self {
        case .file(_, _, let data), .chunk(let data): data.count
        default: 0
        }
    }
}
