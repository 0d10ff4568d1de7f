import FoundationEssentials
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// Writes a tar.zst in chunked layout (docs/protocol.md#chunked-archives-and-file-indexes): every tar member — its header block(s), data and
/// padding — compressed as its own zstd frame(s), the end-of-archive blocks one last frame. Concatenated
/// frames are one valid zstd stream, so stock `bsdtar -xf` and `zstd -d | tar -x` read it as any
/// tar.zst, while the byte range of one member's frames decompresses alone to that member.
///
/// A pipeline on every core: the calling thread takes each member's header from `ArchiveWriter` in
/// tar-stream mode (the same reproducible restricted pax headers as a solid archive), reads and hashes
/// the file's bytes once, straight into the frame buffers (frames of at most `frameSize` bytes of the
/// member), and hands each frame to `ZstdFrames`; its workers compress while the next files are read,
/// and the frames come back in order to be written, a few at a time, while each member's range is noted.
/// Every frame depends only on its input and frames are written in order, so the bytes are the same for
/// the same site whatever the number of workers.
package final class ChunkedArchiveWriter: TarStreamReceiver {
    /// A member's uncompressed bytes per frame, at most. zstd's window at the default level is 2 MiB
    /// (windowLog 21) anyway, so a cut there costs little ratio, bounds each job's memory, and lets a
    /// big file compress (and decompress) on several cores. Part of the archive's bytes: changing it
    /// changes every archive of a file larger than it.
    package static let frameSize = 2 << 20
    /// Compressed bytes collected before one `write`: thousands of small frames would otherwise be
    /// thousands of system calls.
    static let writeSize = 1 << 20

    let path: String
    private let fd: FileDescriptor
    private let frames: ZstdFrames
    private var tar: ArchiveWriter!
    /// What libarchive wrote since the last call that reset it: headers, padding, the end blocks.
    private var captured = [UInt8]()
    /// Data bytes libarchive passes through that are already in a frame (read there by `addFile`).
    private var skipping = 0
    /// The member (index into `members`) of each submitted frame not yet written, from `tagsHead` on;
    /// nil for folders and the end blocks.
    private var tags = [Int?]()
    private var tagsHead = 0
    private var out = [UInt8]()
    private var written: Int64 = 0
    /// The archive's bytes as they go out, so the manifest's hash needs no second read of the file.
    private let archiveHasher = SHA256()
    /// The sha256 of the whole archive file, once `finish` has written it.
    package private(set) var sha256: String?
    /// The path of every file member, and its range in the compressed archive once its frames are out.
    private var members = [(path: PackagePath, offset: Int64, length: Int64)]()
    private var finished = false
    private var isOpen = true

    /// `level` is zstd's (1-19); `workers` compress in parallel (default: one per core); at most
    /// `inFlightLimit` bytes of tar wait for a worker (tests set it small to exercise the waits).
    package init(
        path: String, level: Int, workers: Int = ProcessInfo.processInfo.activeProcessorCount, inFlightLimit: Int = 32 << 20
    ) throws {
        self.path = path
        frames = try ZstdFrames(level: level, workers: workers, inFlightLimit: inFlightLimit)
        fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        tar = try ArchiveWriter(tarStreamTo: self, path: path)
    }

    deinit { if isOpen { fd.close() } }

    package func addDirectory(_ relativePath: String) throws {
        captured.removeAll(keepingCapacity: true)
        try tar.addDirectory(relativePath)
        try tar.finishEntry()
        try submit(captured, member: nil)
    }

    /// Reads the regular file at `source` in as `relativePath`, hashing the bytes that go into the
    /// archive, so the hash in the tree listing is the hash of the bytes in it. A file that changes
    /// size while it is read is an error, not a silently torn entry.
    package func addFile(_ relativePath: String, contentsOf source: String) throws -> TreeFile {
        let file = try FileDescriptor.open(source, O_RDONLY | O_NOFOLLOW)
        return try file.closeAfter { file in
            let size = Int(try ArchiveWriter.regularFileSize(file, source: source))
            captured.removeAll(keepingCapacity: true)
            try tar.addFileHeader(relativePath, size: Int64(size))
            let header = captured
            let padding = (512 - size % 512) % 512
            let total = header.count + size + padding
            members.append((PackagePath(relativePath), -1, 0))
            let member = members.count - 1
            let hasher = SHA256()
            var start = 0
            while start < total {
                let length = min(Self.frameSize, total - start)
                tags.append(member)
                let finished = try frames.append(length: length) { frame in
                    // This frame's share of [header | data | padding], in member offsets.
                    let headerEnd = min(header.count, start + length)
                    if start < headerEnd {
                        header[start..<headerEnd].withUnsafeBytes { frame.copyMemory(from: $0) }
                    }
                    let dataStart = max(start, header.count), dataEnd = min(start + length, header.count + size)
                    if dataStart < dataEnd {
                        let data = UnsafeMutableRawBufferPointer(rebasing: frame[(dataStart - start)..<(dataEnd - start)])
                        try Self.readFully(file, into: data, source: source)
                        hasher.update(UnsafeRawBufferPointer(data))
                        // libarchive counts the entry's bytes; what it passes back is already here.
                        skipping = data.count
                        try tar.writeData(UnsafeRawBufferPointer(data), entry: relativePath)
                    }
                    let paddingStart = max(start, header.count + size) - start
                    if paddingStart < length {
                        UnsafeMutableRawBufferPointer(rebasing: frame[paddingStart..<length]).initializeMemory(as: UInt8.self, repeating: 0)
                    }
                }
                try place(finished)
                start += length
            }
            var probe: UInt8 = 0
            guard try withUnsafeMutableBytes(of: &probe, { try file.read(into: $0, path: source) }) == 0 else {
                throw OfflinePkgError.publishRefused(reason: "\(source) grew while it was being archived")
            }
            captured.removeAll(keepingCapacity: true)
            try tar.finishEntry()
            guard captured.count == padding, captured.allSatisfy({ $0 == 0 }) else {
                throw OfflinePkgError.io(
                    path: path, operation: "libarchive padding of \(relativePath) (expected \(padding) zero bytes, got \(captured.count))",
                    Errno(EIO))
            }
            return TreeFile(archived: hasher.finalize().hex, size: Int64(size))
        }
    }

    /// Writes the end blocks as the last frame and closes the file. Returns each file's byte range in
    /// the compressed archive, in the order the files were added.
    package func finish() throws -> [(path: PackagePath, offset: Int64, length: Int64)] {
        guard !finished else { return members }
        finished = true
        captured.removeAll(keepingCapacity: true)
        try tar.finish()
        try submit(captured, member: nil)
        try place(frames.finish())
        try flush()
        isOpen = false
        fd.close()
        sha256 = archiveHasher.finalize().hex
        return members
    }

    package func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let skipped = min(skipping, bytes.count)
        skipping -= skipped
        if skipped < bytes.count { captured.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[skipped...])) }
        return true
    }

    /// Reads exactly `buffer.count` bytes of `file`; a file that ends first shrank since its `fstat`.
    private static func readFully(_ file: FileDescriptor, into buffer: UnsafeMutableRawBufferPointer, source: String) throws {
        var filled = 0
        while filled < buffer.count {
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]), path: source)
            guard count > 0 else {
                throw OfflinePkgError.publishRefused(reason: "\(source) shrank while it was being archived")
            }
            filled += count
        }
    }

    private func submit(_ frame: [UInt8], member: Int?) throws {
        tags.append(member)
        try place(frames.submit(frame))
    }

    /// Appends finished frames (in archive order) to the output, noting where each member's are.
    private func place(_ finished: [ZstdFrames.Batch]) throws {
        for batch in finished {
            var offset = written + Int64(out.count)
            for length in batch.lengths {
                if let member = tags[tagsHead] {
                    if members[member].offset < 0 { members[member].offset = offset }
                    members[member].length += Int64(length)
                }
                tagsHead += 1
                offset += Int64(length)
            }
            out.append(contentsOf: batch.bytes)
        }
        if tagsHead >= 4096 && tagsHead * 2 >= tags.count {
            tags.removeFirst(tagsHead)
            tagsHead = 0
        }
        if out.count >= Self.writeSize { try flush() }
    }

    private func flush() throws {
        try fd.writeAll(out, path: path)
        out.withUnsafeBytes { archiveHasher.update($0) }
        written += Int64(out.count)
        out.removeAll(keepingCapacity: true)
    }
}
