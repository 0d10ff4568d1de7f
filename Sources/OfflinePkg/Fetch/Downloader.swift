import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// Streams one archive to `downloads/<sha256>.part` while hashing it, refuses it past its size,
/// resumes an interrupted transfer with `Range`/`If-Range`, and hands back a verified file.
package struct Downloader: Sendable {
    package var transport: any Transport
    package var layout: CacheLayout
    package var retry: RetryPolicy
    /// The stall clock and rate floor; an archive has no deadline (its size varies), the floor bounds it.
    package var limits: RetrievalLimits
    package var caBundle: String?

    package init(
        transport: any Transport, layout: CacheLayout, retry: RetryPolicy, limits: RetrievalLimits, caBundle: String? = nil
    ) {
        self.caBundle = caBundle
        self.transport = transport
        self.layout = layout
        self.retry = retry
        self.limits = limits
    }

    /// What one finished download cost.
    package struct Outcome: Sendable {
        package var path: String
        /// Bytes that crossed the network in this call (less than the size after a resume).
        package var bytesFetched: Int64
    }

    /// Downloads `file` from `url` (the manifest's URL resolved), named `name` in errors.
    package func fetch(
        _ file: RemoteFile, from url: URL, name: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> Outcome {
        let part = layout.partialDownload(sha256: file.sha256)
        let meta = layout.partialDownloadMeta(sha256: file.sha256)
        // A complete file left by an earlier run that died before unpacking it.
        if FileSystem.fileSize(part) == file.size, try hashFile(part) == file.sha256 {
            return Outcome(path: part, bytesFetched: 0)
        }
        var fetched: Int64 = 0
        try await retry.run { _ in
            fetched += try await attempt(file, url: url, name: name, part: part, meta: meta, progress: progress)
        }
        return Outcome(path: part, bytesFetched: fetched)
    }

    private func attempt(
        _ file: RemoteFile, url: URL, name: String, part: String, meta: String,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> Int64 {
        let resume = ResumePoint.load(part: part, meta: meta, url: url.absoluteString, size: file.size)
        var headers = [(String, String)]()
        if let resume {
            headers.append(("Range", "bytes=\(resume.offset)-"))
            headers.append(("If-Range", resume.validator))
        }
        let sink = try DownloadSink(path: part, resumeFrom: resume?.offset ?? 0, limit: file.size, name: name)
        defer { sink.close() }
        let request = TransferRequest(url: url, headers: headers, limits: limits, caBundle: caBundle)
        let urlText = url.absoluteString
        _ = try await transport.get(request) { head in
            if head.status == 416 {
                // The bytes on disk no longer fit the file on the server: start over on the next try.
                FileSystem.discardFile(meta)
                FileSystem.discardFile(part)
                throw OfflinePkgError.transfer(url: urlText, failure: .rangeNotSatisfiable)
            }
            if !head.isSuccess { throw OfflinePkgError.transfer(url: urlText, failure: head.failure) }
            if let total = head.declaredTotalLength, total != file.size {
                // The file on the server is not the one the manifest describes: no retry will change that.
                throw OfflinePkgError.sizeMismatch(
                    what: name, reason: "the server's file is \(total) bytes, the manifest promised \(file.size)")
            }
            try sink.begin(partial: head.status == 206 && resume != nil, contentRange: head.headers["content-range"])
            // Remember the validator before the first byte lands, so a cut-off transfer can resume.
            ResumePoint.save(meta: meta, url: urlText, head: head)
        } onBody: { buffer in
            try sink.write(buffer)
            progress(Int64(buffer.count))
        }
        let (digest, written, fetched) = try sink.finish()
        guard written == file.size else {
            throw OfflinePkgError.transfer(url: urlText, failure: .truncated(received: written, expected: file.size))
        }
        guard digest == file.sha256 else {
            FileSystem.discardFile(part)
            FileSystem.discardFile(meta)
            throw OfflinePkgError.hashMismatch(what: name, expected: file.sha256, actual: digest)
        }
        FileSystem.discardFile(meta)
        return fetched
    }

    private func hashFile(_ path: String) throws -> String { try FileHasher.sha256(ofFile: path) }
}

/// Where an interrupted download can continue: the bytes already on disk and the validator
/// (`ETag`, else `Last-Modified`) the server sent with them, for `If-Range`.
private struct ResumePoint: Codable {
    var url: String
    var validator: String
    var offset: Int64 = 0

    static func load(part: String, meta: String, url: String, size: Int64) -> ResumePoint? {
        guard let bytes = try? FileSystem.read(meta, limit: 64 << 10),
            var point = try? JSONDecoder().decode(ResumePoint.self, from: Data(bytes)), point.url == url,
            let offset = FileSystem.fileSize(part), offset > 0, offset < size
        else { return nil }
        point.offset = offset
        return point
    }

    static func save(meta: String, url: String, head: TransferResponseHead) {
        // Weak ETags may not be used with If-Range (RFC 9110 §13.1.5); fall back to Last-Modified.
        let etag = head.headers["etag"].flatMap { $0.hasPrefix("W/") ? nil : $0 }
        guard let validator = etag ?? head.headers["last-modified"] else {
            FileSystem.discardFile(meta)
            return
        }
        // Not flushed: a resume point lost to a power loss only costs a download from the start (a
        // damaged one fails to decode and counts as none), and flushing it cost two fsyncs a package.
        try? FileSystem.writeAtomically(
            JSONCoding.encode(ResumePoint(url: url, validator: validator), pretty: false), to: meta, durable: false)
    }
}

/// The file end of a download: writes, hashes and counts on the transfer's thread.
private final class DownloadSink: @unchecked Sendable {
    // Touched only by the one transfer thread between `begin` and `finish`.
    let path: String
    let name: String
    let limit: Int64
    let descriptor: FileDescriptor
    let resumeOffset: Int64
    var hasher = SHA256()
    var written: Int64 = 0
    var fetched: Int64 = 0

    init(path: String, resumeFrom offset: Int64, limit: Int64, name: String) throws {
        self.path = path
        self.name = name
        self.limit = limit
        resumeOffset = offset
        // Private until verified: a partial download is nobody else's business.
        descriptor = try FileDescriptor.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600)
    }

    func close() { descriptor.close() }

    /// Called once the status is known: a 206 continues after the bytes on disk, anything else restarts.
    func begin(partial: Bool, contentRange: String?) throws {
        hasher = SHA256()
        if partial, let contentRange, contentRange.hasPrefix("bytes \(resumeOffset)-") {
            // Re-hash what is already on disk, then append.
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            try descriptor.seek(to: 0, path: path)
            var remaining = resumeOffset
            while remaining > 0 {
                let count = try buffer.withUnsafeMutableBytes {
                    try descriptor.read(
                        into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<Int(min(Int64($0.count), remaining))]), path: path)
                }
                if count == 0 { break }
                buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                remaining -= Int64(count)
            }
            written = resumeOffset - remaining
        } else {
            // Only a file with bytes in it is cut: on ext4, truncating a file to 0 marks it to be written
            // out when it is closed (auto_da_alloc), which wrote every new download to the disk before
            // the sync deleted it: twice the bytes (the `sync-writes` benchmark row).
            if (FileSystem.fileSize(path) ?? 0) > 0 { try descriptor.truncate(to: 0, path: path) }
            try descriptor.seek(to: 0, path: path)
            written = 0
        }
    }

    func write(_ buffer: UnsafeRawBufferPointer) throws {
        guard written + Int64(buffer.count) <= limit else {
            throw OfflinePkgError.sizeMismatch(what: name, reason: "more than the \(limit) bytes the manifest promised")
        }
        try descriptor.writeAll(buffer, path: path)
        hasher.update(buffer)
        written += Int64(buffer.count)
        fetched += Int64(buffer.count)
    }

    func finish() throws -> (digest: String, written: Int64, fetched: Int64) {
        let digest = hasher.finalize().hex
        hasher = SHA256()
        return (digest, written, fetched)
    }
}
