import Foundation

/// The file-system end of an unpack, on threads of its own: the reading thread decompresses and checks
/// every entry, then hands the checked bytes to a lane, which creates, writes, hashes and closes the
/// file through a `TreeWriter` of its own. Creating a file costs more than decompressing it (on ext4
/// most of a small file's time is the inode allocation of `openat`), and creations in different folders
/// run side by side, so the files go to a lane by their folder: two lanes on two cores unpack a 10k-file
/// archive in about half the time of one thread (docs/benchmarks.md, "One big package").
///
/// Nothing changes what is accepted: every rule is applied on the reading thread before a byte is
/// handed over, and the lanes only write what was checked. Each lane's queue is bounded in bytes, so an
/// unpack's memory stays a few MiB whatever the archive; the first failure of any lane stops the reader
/// at its next hand-over and is the unpack's error.
final class WriterLanes: @unchecked Sendable {
    // The state below is guarded by `condition`; each lane's `results` is its thread's alone until `finish`.
    private let condition = NSCondition()
    private var lanes: [Lane]
    private var failure: (any Error)?
    private var threadsRunning: Int
    private let archiveName: String
    private let bounds: UnpackBounds
    /// Called on the lane with each file it finished (its writer, path and sha256): the content store's
    /// insert (`ContentStore.keepFile`), which links the new inode to its content name.
    private let keepFile: ((TreeWriter, PackagePath, String) throws -> Void)?

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
    /// Bytes queued per lane before the reader waits: bounds an unpack's memory.
    static let queueLimit = 4 << 20

    private final class Lane {
        let writer: TreeWriter
        init(writer: TreeWriter) { self.writer = writer }
        var queue: [Item] = []
        var head = 0
        var queuedBytes = 0
        var results: [PackagePath: TreeFile] = [:]
    }
    private var closed = false

    /// Starts `count` lanes writing below `root` (`replacesFiles` as `TreeWriter` takes it).
    init(
        root: String, replacesFiles: Bool, count: Int, archiveName: String, bounds: UnpackBounds,
        keepFile: ((TreeWriter, PackagePath, String) throws -> Void)? = nil
    ) throws {
        self.archiveName = archiveName
        self.bounds = bounds
        self.keepFile = keepFile
        // Each lane opens the root before the first entry is read, so a missing staging folder fails here.
        lanes = try (0..<count).map { _ in Lane(writer: try TreeWriter(root: root, replacesFiles: replacesFiles)) }
        threadsRunning = count
        for index in 0..<count {
            let thread = Thread { [self] in run(lane: lanes[index]) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// The number of lanes for this machine: one per core, at least two (the reader and one lane
    /// already overlap), at most four (past that the folder locks of the file system serialise them).
    static var defaultCount: Int { min(4, max(2, ProcessInfo.processInfo.activeProcessorCount)) }

    /// The lane of everything in `folder`: files of one folder stay in one lane, so its `TreeWriter`
    /// keeps that folder open and the archive's order within a folder is the order on disk.
    func lane(for folder: PackagePath) -> Int {
        lanes.count == 1 ? 0 : Int(UInt(bitPattern: folder.hashValue) % UInt(lanes.count))
    }

    /// Queues `item` on lane `index`, waiting while the lane holds `queueLimit` bytes. Throws the first
    /// failure of any lane, or the unpack's deadline passing while it waits.
    func send(_ item: Item, to index: Int) throws {
        let bytes: Int
        switch item {
        case .file(_, _, let data), .chunk(let data): bytes = data.count
        default: bytes = 0
        }
        condition.lock()
        defer { condition.unlock() }
        let lane = lanes[index]
        while failure == nil && lane.queuedBytes > Self.queueLimit {
            if let reason = bounds.exceeded(checkMemory: false) {
                failure = OfflinePkgError.archiveRefused(archive: archiveName, entry: nil, reason: reason)
                break
            }
            _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1))
        }
        if let failure { throw failure }
        lane.queue.append(item)
        lane.queuedBytes += bytes
        condition.broadcast()
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
        while lane.head == lane.queue.count && !closed && failure == nil { condition.wait() }
        guard failure == nil, lane.head < lane.queue.count else { return nil }
        let item = lane.queue[lane.head]
        // The slot lets go of the bytes now: a reader that keeps the queue from ever draining (a 1 GiB
        // file) would otherwise keep every piece it sent alive until the end of the file.
        lane.queue[lane.head] = .end
        lane.head += 1
        switch item {
        case .file(_, _, let data), .chunk(let data): lane.queuedBytes -= data.count
        default: break
        }
        // Drop the taken slots once the queue has drained, or once they are many, so the array stays small.
        if lane.head == lane.queue.count {
            lane.queue.removeAll(keepingCapacity: true)
            lane.head = 0
        } else if lane.head >= 4096 {
            lane.queue.removeFirst(lane.head)
            lane.head = 0
        }
        condition.broadcast()
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
        condition.lock()
        threadsRunning -= 1
        condition.broadcast()
        condition.unlock()
    }

    private func write(_ item: Item, lane: Lane) throws {
        let writer = lane.writer
        switch item {
        case .folder(let path, let raw):
            do { try writer.makeFolder(path.string) } catch let conflict as TreeWriter.Conflict {
                throw refuse(raw, conflict.reason)
            }
        case .file(let path, let raw, let data):
            let hasher = SHA256()
            try writeFile(path, raw: raw, writer: writer) { file, target in
                try data.withUnsafeBytes { buffer in
                    hasher.update(buffer)
                    try Self.write(buffer, to: file, target: target)
                }
            }
            try finished(path, TreeFile(sha256: hasher.finalize().hex, size: Int64(data.count)), lane: lane)
        case .begin(let path, let raw):
            let hasher = SHA256()
            var size: Int64 = 0
            try writeFile(path, raw: raw, writer: writer) { file, target in
                while let piece = next(lane) {
                    guard case .chunk(let data) = piece else { return }
                    try data.withUnsafeBytes { buffer in
                        hasher.update(buffer)
                        try Self.write(buffer, to: file, target: target)
                    }
                    size += Int64(data.count)
                }
            }
            try finished(path, TreeFile(sha256: hasher.finalize().hex, size: size), lane: lane)
        case .chunk, .end:
            break  // only ever consumed inside `.begin`
        }
    }

    private func finished(_ path: PackagePath, _ file: TreeFile, lane: Lane) throws {
        try keepFile?(lane.writer, path, file.sha256)
        lane.results[path] = file
    }

    private func writeFile(
        _ path: PackagePath, raw: PackagePath, writer: TreeWriter, _ body: (FileDescriptor, String) throws -> Void
    ) throws {
        if let reason = bounds.exceeded(checkMemory: false) {
            throw OfflinePkgError.archiveRefused(archive: archiveName, entry: nil, reason: reason)
        }
        let target = writer.root + "/" + path.string
        // No early writeback here: `sync_file_range(SYNC_FILE_RANGE_WRITE)` per file tripled the
        // unpack's system time (one small write-out per file instead of the syncfs's merged one).
        do { try writer.writeFile(path.string) { file in try body(file, target) } } catch let conflict as TreeWriter.Conflict {
            throw refuse(raw, conflict.reason)
        }
    }

    private static func write(_ buffer: UnsafeRawBufferPointer, to file: FileDescriptor, target: String) throws {
        do throws(Errno) { try file.writeAll(buffer) } catch { throw OfflinePkgError.io(path: target, operation: "write", error) }
    }

    private func refuse(_ entry: PackagePath, _ reason: String) -> OfflinePkgError {
        .archiveRefused(archive: archiveName, entry: entry, reason: reason)
    }
}
