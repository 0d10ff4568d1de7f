import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes a tar.zst in chunked layout (SPEC §13): every tar member — its header block(s), data and
/// padding — compressed as its own zstd frame(s), the end-of-archive blocks one last frame. Concatenated
/// frames are one valid zstd stream, so stock `bsdtar -xf` and `zstd -d | tar -x` read it as any
/// tar.zst, while the byte range of one member's frames decompresses alone to that member.
///
/// The tar bytes come from `ArchiveWriter` in tar-stream mode (the same reproducible restricted pax
/// headers as a solid archive); they are cut into members at each entry's end and into frames of at
/// most `frameSize` bytes inside a big member, and compressed a batch at a time on every core. Frames
/// are written in order, and each depends only on its input, so the bytes are the same for the same site.
package final class ChunkedArchiveWriter: TarStreamReceiver {
    /// A member's uncompressed bytes per frame, at most. zstd's window at the default level is 2 MiB
    /// (windowLog 21) anyway, so a cut there costs little ratio, bounds each job's memory, and lets a
    /// big file compress (and decompress) on several cores. Part of the archive's bytes: changing it
    /// changes every archive of a file larger than it.
    package static let frameSize = 2 << 20
    /// Uncompressed bytes collected before a batch is compressed: enough jobs to keep every core busy,
    /// little enough memory (twice this, with the outputs) for any machine that publishes.
    static let batchSize = 16 << 20

    private struct Job {
        var bytes: [UInt8]
        /// Index into `members`; the end blocks belong to no member.
        var member: Int?
    }

    let path: String
    private let fd: FileDescriptor
    private let frames: ZstdFrames
    private var tar: ArchiveWriter!
    private var current = [UInt8]()
    private var currentMember: Int?
    private var batch = [Job]()
    private var batchBytes = 0
    private var written: Int64 = 0
    /// The path of every file member, and its range in the compressed archive once its frames are out.
    private var members = [(path: PackagePath, offset: Int64, length: Int64)]()
    private var failure: OfflinePkgError?
    private var finished = false
    private var isOpen = true

    /// `level` is zstd's (1-19); `workers` compress in parallel (default: one per core).
    package init(path: String, level: Int, workers: Int = ProcessInfo.processInfo.activeProcessorCount) throws {
        self.path = path
        frames = try ZstdFrames(level: level, workers: workers)
        fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        tar = try ArchiveWriter(tarStreamTo: self, path: path)
    }

    deinit { if isOpen { fd.close() } }

    package func addDirectory(_ relativePath: String) throws {
        try member(nil) { try tar.addDirectory(relativePath) }
    }

    /// Streams the file at `source` in as `relativePath` (see `ArchiveWriter.addFile(_:contentsOf:)`).
    package func addFile(_ relativePath: String, contentsOf source: String) throws -> TreeFile {
        members.append((PackagePath(relativePath), -1, 0))
        return try member(members.count - 1) { try tar.addFile(relativePath, contentsOf: source) }
    }

    /// Writes the end blocks as the last frame and closes the file. Returns each file's byte range in
    /// the compressed archive, in the order the files were added.
    package func finish() throws -> [(path: PackagePath, offset: Int64, length: Int64)] {
        guard !finished else { return members }
        finished = true
        try member(nil) { try tar.finish() }
        try flush()
        isOpen = false
        fd.close()
        return members
    }

    /// Runs `write` (one entry, or the trailer) and closes its bytes as a member of their own.
    @discardableResult
    private func member<Result>(_ index: Int?, _ write: () throws -> Result) throws -> Result {
        currentMember = index
        let result: Result
        do {
            result = try write()
            if !finished { try tar.finishEntry() }
        } catch {
            throw failure ?? error
        }
        if let failure { throw failure }
        if !current.isEmpty { try enqueue(current) }
        current = []
        return result
    }

    package func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard failure == nil else { return false }
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(rest.count, Self.frameSize - current.count)
            // Rebased to a buffer so the append is one memcpy, not a byte-by-byte walk of a slice.
            current.append(contentsOf: UnsafeRawBufferPointer(rebasing: rest.prefix(take)))
            rest = rest.dropFirst(take)
            if current.count == Self.frameSize {
                do {
                    try enqueue(current)
                } catch {
                    failure = error as? OfflinePkgError ?? .io(path: path, operation: "write", Errno(EIO))
                    return false
                }
                current = []
                current.reserveCapacity(64 << 10)
            }
        }
        return true
    }

    private func enqueue(_ bytes: [UInt8]) throws {
        batch.append(Job(bytes: bytes, member: currentMember))
        batchBytes += bytes.count
        if batchBytes >= Self.batchSize { try flush() }
    }

    /// Compresses the batch on every core and writes its frames in order, noting where each member's are.
    private func flush() throws {
        guard !batch.isEmpty else { return }
        let compressed = try frames.compress(batch.map(\.bytes))
        var out = [UInt8]()
        out.reserveCapacity(compressed.reduce(0) { $0 + $1.count })
        for (job, frame) in zip(batch, compressed) {
            if let member = job.member {
                if members[member].offset < 0 { members[member].offset = written + Int64(out.count) }
                members[member].length += Int64(frame.count)
            }
            out.append(contentsOf: frame)
        }
        // One write a batch: thousands of small frames would otherwise be thousands of system calls.
        try fd.writeAll(out, path: path)
        written += Int64(out.count)
        batch.removeAll(keepingCapacity: true)
        batchBytes = 0
    }
}
