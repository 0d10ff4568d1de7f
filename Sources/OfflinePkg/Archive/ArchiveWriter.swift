internal import CArchive

#if canImport(Glibc)
import Glibc
#endif

/// Writes a reproducible archive with libarchive: the same entries in the same order give the same
/// bytes on any machine, at any time, from any checkout. Nothing of the publisher's file system leaks
/// in: every entry has mtime 0, uid/gid 0 and no owner names, files 0644 and folders 0755; tar is
/// restricted pax (plain ustar headers, an extended header only for a long or non-ASCII path, never
/// atime/ctime); gzip carries no timestamp. Callers add entries in path-byte order (see `SiteScan`).
///
/// mtime 0 also keeps zip reproducible across time zones: libarchive writes the DOS date from local
/// time, and 1970 in any zone falls before the DOS epoch (1980), which libarchive clamps to a constant.
///
/// The publisher (`OfflinePkgPublish`) is its only user; it lives here because libarchive is imported
/// by one module, this one, which reads archives too (docs/design.md, "Targets").
package final class ArchiveWriter {
    private let archive: OpaquePointer
    private let entry: OpaquePointer
    /// Where the archive is written, for error messages.
    package let path: String
    private var finished = false
    /// In tar-stream mode, who takes the bytes (held here so libarchive's client pointer stays valid).
    private let receiver: TarStreamReceiver?

    /// `level` is the compressor's level (zstd 1-19, gzip and zip 1-9); nil takes the format's default.
    package init(path: String, format: ArchiveFormat, level: Int? = nil) throws {
        self.path = path
        receiver = nil
        guard let archive = archive_write_new(), let entry = archive_entry_new() else {
            throw OfflinePkgError.io(path: path, operation: "libarchive allocation", Errno(ENOMEM))
        }
        self.archive = archive
        self.entry = entry
        // Options are spelled as libarchive's option strings so a failure names the one that was refused.
        switch format {
        case .tarZstd:
            try check(archive_write_set_format_pax_restricted(archive), "set format pax_restricted")
            try check(archive_write_add_filter_zstd(archive), "add zstd filter")
            // Level 3, zstd's own default and bsdtar's: the highest levels take hundreds of times as long
            // to write for an archive not even a fifth smaller, and devices decode every level at the same
            // speed. `--compression-level` trades.
            let zstdLevel = String(level ?? ArchiveFormat.tarZstd.defaultLevel)
            try checkOption(
                archive_write_set_filter_option(archive, "zstd", "compression-level", zstdLevel),
                "zstd:compression-level=\(zstdLevel)")
        case .tarGzip:
            try check(archive_write_set_format_pax_restricted(archive), "set format pax_restricted")
            try check(archive_write_add_filter_gzip(archive), "add gzip filter")
            let gzipLevel = String(level ?? ArchiveFormat.tarGzip.defaultLevel)
            try checkOption(
                archive_write_set_filter_option(archive, "gzip", "compression-level", gzipLevel),
                "gzip:compression-level=\(gzipLevel)")
            // No mtime in the gzip header (the `gzip:!timestamp` option).
            try checkOption(archive_write_set_filter_option(archive, "gzip", "timestamp", nil), "gzip:!timestamp")
        case .zip:
            try check(archive_write_set_format_zip(archive), "set format zip")
            try checkOption(archive_write_set_format_option(archive, "zip", "compression", "deflate"), "zip:compression=deflate")
            let zipLevel = String(level ?? ArchiveFormat.zip.defaultLevel)
            try checkOption(
                archive_write_set_format_option(archive, "zip", "compression-level", zipLevel), "zip:compression-level=\(zipLevel)")
        }
        // No padding of the last block: the archive is never written to a tape.
        archive_write_set_bytes_in_last_block(archive, 1)
        try check(archive_write_open_filename(archive, path), "open for writing")
    }

    /// Tar-stream mode: the uncompressed tar (the same restricted pax headers as `.tarZstd`) handed to
    /// `receiver` as libarchive produces it, unbuffered, so that a caller who ends each entry with
    /// `finishEntry()` knows where every member's bytes start and stop. `path` names the archive in errors.
    package init(tarStreamTo receiver: TarStreamReceiver, path: String) throws {
        self.path = path
        self.receiver = receiver
        guard let archive = archive_write_new(), let entry = archive_entry_new() else {
            throw OfflinePkgError.io(path: path, operation: "libarchive allocation", Errno(ENOMEM))
        }
        self.archive = archive
        self.entry = entry
        try check(archive_write_set_format_pax_restricted(archive), "set format pax_restricted")
        // 0: no blocking, every write goes to the callback as it happens (and no padding at the end).
        try check(archive_write_set_bytes_per_block(archive, 0), "set bytes per block")
        let client = Unmanaged.passUnretained(receiver as AnyObject).toOpaque()
        try check(archive_write_open2(archive, client, nil, tarStreamWrite, nil, nil), "open for writing")
    }

    deinit {
        archive_entry_free(entry)
        // Frees without closing properly if `finish` was never reached; the file is then garbage.
        archive_write_free(archive)
    }

    /// Adds a folder entry.
    package func addDirectory(_ relativePath: String) throws {
        prepareEntry(relativePath, type: 0o040000, mode: 0o755, size: 0)
        try check(archive_write_header(archive, entry), "write header of \(relativePath)")
    }

    /// Adds a small in-memory file (the delta control member).
    package func addFile(_ relativePath: String, bytes: [UInt8]) throws {
        prepareEntry(relativePath, type: 0o100000, mode: 0o644, size: Int64(bytes.count))
        try check(archive_write_header(archive, entry), "write header of \(relativePath)")
        try bytes.withUnsafeBytes { buffer in try writeData(buffer, entry: relativePath) }
    }

    /// Streams the regular file at `source` into the archive as `relativePath`, hashing what it writes,
    /// so the hash in the tree listing is the hash of the bytes in the archive. A file that changes
    /// size while it is read is an error, not a silently torn entry.
    @discardableResult
    package func addFile(_ relativePath: String, contentsOf source: String) throws -> TreeFile {
        let fd = try FileDescriptor.open(source, O_RDONLY | O_NOFOLLOW)
        return try fd.closeAfter { fd in
            let size = try Self.regularFileSize(fd, source: source)
            prepareEntry(relativePath, type: 0o100000, mode: 0o644, size: size)
            try check(archive_write_header(archive, entry), "write header of \(relativePath)")
            let hasher = SHA256()
            // As big as the file and one byte more (so growth shows in the first read), up to 256 KiB:
            // zero-filling 256 KiB for each of 10,000 small files was 2.6 GB of memset.
            var buffer = [UInt8](repeating: 0, count: Int(min(size, 256 << 10)) + 1)
            var remaining = size
            while true {
                let count = try buffer.withUnsafeMutableBytes { try fd.read(into: $0, path: source) }
                if count == 0 { break }
                guard Int64(count) <= remaining else {
                    throw OfflinePkgError.publishRefused(reason: "\(source) grew while it was being archived")
                }
                remaining -= Int64(count)
                try buffer.withUnsafeBytes { raw in
                    let chunk = UnsafeRawBufferPointer(rebasing: raw[0..<count])
                    hasher.update(chunk)
                    try writeData(chunk, entry: relativePath)
                }
            }
            guard remaining == 0 else {
                throw OfflinePkgError.publishRefused(reason: "\(source) shrank while it was being archived")
            }
            return TreeFile(sha256: hasher.finalize().hex, size: size)
        }
    }

    /// Tar-stream mode: the header of a regular file of `size` bytes, alone. The caller writes exactly
    /// `size` bytes with `writeData(_:entry:)` and then calls `finishEntry()` (the chunked publisher reads
    /// and hashes each file itself, straight into the frames it compresses).
    package func addFileHeader(_ relativePath: String, size: Int64) throws {
        prepareEntry(relativePath, type: 0o100000, mode: 0o644, size: size)
        try check(archive_write_header(archive, entry), "write header of \(relativePath)")
    }

    /// The size of the open file `fd` (opened from `source`); anything but a regular file is refused.
    package static func regularFileSize(_ fd: FileDescriptor, source: String) throws -> Int64 {
        var info = stat()
        guard fstat(fd.rawValue, &info) == 0 else {
            throw OfflinePkgError.io(path: source, operation: "fstat", Errno.current)
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw OfflinePkgError.publishRefused(reason: "\(source) is not a regular file")
        }
        return Int64(info.st_size)
    }

    /// Ends the current entry: its padding to the next 512-byte block is written now, not with the next header.
    package func finishEntry() throws {
        try check(archive_write_finish_entry(archive), "finish entry")
    }

    /// Writes the trailer and closes the file; the archive is complete only after this returns.
    package func finish() throws {
        guard !finished else { return }
        finished = true
        try check(archive_write_close(archive), "close")
    }

    private func prepareEntry(_ relativePath: String, type: mode_t, mode: mode_t, size: Int64) {
        archive_entry_clear(entry)
        archive_entry_copy_pathname(entry, relativePath)
        archive_entry_set_filetype(entry, UInt32(type))
        archive_entry_set_perm(entry, mode)
        archive_entry_set_size(entry, size)
        archive_entry_set_mtime(entry, 0, 0)
        archive_entry_set_uid(entry, 0)
        archive_entry_set_gid(entry, 0)
        // Left unset: uname, gname, atime, ctime, birthtime — libarchive then writes none of them.
    }

    package func writeData(_ buffer: UnsafeRawBufferPointer, entry name: String) throws {
        var offset = 0
        while offset < buffer.count {
            let written = archive_write_data(archive, buffer.baseAddress! + offset, buffer.count - offset)
            guard written > 0 else {
                // 0 or negative: nothing more will go in, and the entry would be short.
                throw failure("write data of \(name)")
            }
            offset += written
        }
    }

    /// ARCHIVE_OK and ARCHIVE_WARN pass: libarchive warns, for one, when a path is not valid in the
    /// C locale and it writes it as raw bytes (pax `hdrcharset=BINARY`), which devices read back as is.
    private func check(_ status: Int32, _ what: String) throws {
        guard status < -20 else { return }
        throw failure(what)
    }

    /// An option libarchive does not know answers ARCHIVE_WARN; for reproducibility that must fail.
    private func checkOption(_ status: Int32, _ what: String) throws {
        guard status != 0 else { return }
        throw failure(what)
    }

    private func failure(_ what: String) -> OfflinePkgError {
        let message = archive_error_string(archive).map { String(cString: $0) } ?? "unknown error"
        return OfflinePkgError.io(path: path, operation: "libarchive \(what) (\(message))", Errno(archive_errno(archive)))
    }
}

/// Takes the tar stream of an `ArchiveWriter(tarStreamTo:path:)`; returns false to stop the archive.
package protocol TarStreamReceiver: AnyObject {
    func receive(_ bytes: UnsafeRawBufferPointer) -> Bool
}

/// libarchive's write callback for tar-stream mode (a plain function: libarchive calls it from C).
private func tarStreamWrite(
    _ archive: OpaquePointer?, _ client: UnsafeMutableRawPointer?, _ buffer: UnsafeRawPointer?, _ length: Int
) -> Int {
    guard let client else { return -1 }
    let receiver = Unmanaged<AnyObject>.fromOpaque(client).takeUnretainedValue() as! TarStreamReceiver
    return receiver.receive(UnsafeRawBufferPointer(start: buffer, count: length)) ? length : -1
}

extension TreeFile {
    /// A file as a writer outside this module listed it (the chunked publisher hashes what it archives).
    package init(archived sha256: String, size: Int64) { self.init(sha256: sha256, size: size) }
}
