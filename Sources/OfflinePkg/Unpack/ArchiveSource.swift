internal import CArchive

#if canImport(Glibc)
import Glibc
#endif

/// The archive file as libarchive reads it, through our own descriptor and read callback, so that every
/// read checks the unpack's bounds: a reader that loops or grows on a crafted archive is ended by the
/// deadline or the memory bound instead of holding the root lock for ever.
///
/// It also decides what libarchive may read at all (docs/protocol.md#archives): the compression is recognised here from
/// the first bytes and handed to libarchive as the one filter (no bidding, so a gzip inside a gzip is
/// never peeled), and only the tar and zip readers are registered.
final class ArchiveSource {
    let path: String
    let bounds: UnpackBounds
    /// Why the last read failed, in our words, when it was us (a bound, an I/O error): libarchive only
    /// sees -1 and would report a vague "read error".
    private(set) var failure: OfflinePkgError?
    private let fd: FileDescriptor
    private var isClosed = false
    private let buffer: UnsafeMutableRawBufferPointer
    private var reads = 0

    private static let blockSize = 64 << 10
    /// /proc/self/statm costs a few microseconds: read it every 4 blocks (256 KiB of input).
    private static let memoryCheckInterval = 4

    init(path: String, bounds: UnpackBounds) throws {
        self.path = path
        self.bounds = bounds
        fd = try FileDescriptor.open(path, O_RDONLY)
        buffer = .allocate(byteCount: Self.blockSize, alignment: 16)
    }

    deinit {
        close()
        buffer.deallocate()
    }

    /// Lets go of the archive file before the unpack ends: the installer deletes a download the reader
    /// is done with, and the kernel drops a deleted file's pages only once no descriptor holds it.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        fd.close()
    }

    /// The compression the archive's first bytes announce, or `ARCHIVE_FILTER_NONE`.
    func sniffFilter() throws -> Int32 {
        let count: Int
        do throws(Errno) { count = try valueOrErrno { pread(fd.rawValue, buffer.baseAddress, 6, 0) } } catch {
            throw OfflinePkgError.io(path: path, operation: "read", error)
        }
        let magic = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
        for (code, prefix) in Self.magics where magic.starts(with: prefix) { return code }
        return ARCHIVE_FILTER_NONE
    }

    private static let magics: [(Int32, [UInt8])] = [
        (ARCHIVE_FILTER_GZIP, [0x1f, 0x8b]),
        (ARCHIVE_FILTER_BZIP2, Array("BZh".utf8)),
        (ARCHIVE_FILTER_XZ, [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]),
        (ARCHIVE_FILTER_ZSTD, [0x28, 0xb5, 0x2f, 0xfd]),
        (ARCHIVE_FILTER_LZ4, [0x04, 0x22, 0x4d, 0x18]),
        (ARCHIVE_FILTER_LZ4, [0x02, 0x21, 0x4c, 0x18]),  // lz4's legacy frame, which libarchive reads too
    ]

    /// The filters docs/protocol.md#archives allows, all linked into libarchive on Debian (zlib, libbz2, liblzma, libzstd,
    /// liblz4): none of them starts a program.
    static let allowedFilters: Set<Int32> = [
        ARCHIVE_FILTER_NONE, ARCHIVE_FILTER_GZIP, ARCHIVE_FILTER_BZIP2, ARCHIVE_FILTER_XZ, ARCHIVE_FILTER_ZSTD,
        ARCHIVE_FILTER_LZ4,
    ]

    /// Registers what may be read and opens `reader` over this source. Returns nil on success, or why the
    /// archive is refused before any entry.
    func open(_ reader: OpaquePointer) throws -> String? {
        let filter = try sniffFilter()
        // The tar reader covers ustar, pax and GNU tar; the zip reader its streaming and seeking forms.
        guard archive_read_support_format_tar(reader) == ARCHIVE_OK, archive_read_support_format_zip(reader) == ARCHIVE_OK
        else { return "libarchive lacks its tar or zip reader" }
        if filter != ARCHIVE_FILTER_NONE {
            // ARCHIVE_WARN here means libarchive would run an external program for it: never.
            guard archive_read_append_filter(reader, filter) == ARCHIVE_OK else {
                return "this libarchive would start an external program for \(Self.filterName(filter)): refused"
            }
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        archive_read_set_seek_callback(reader, seekArchiveSource)
        guard archive_read_open2(reader, context, nil, readArchiveSource, nil, nil) == ARCHIVE_OK else {
            if let failure { throw failure }
            return "not a tar or zip archive (\(ArchiveUnpacker.errorString(reader)))"
        }
        let count = archive_filter_count(reader)
        let codes = (0..<count).map { archive_filter_code(reader, $0) }
        if let other = codes.first(where: { !Self.allowedFilters.contains($0) }) {
            return "compression \(Self.filterName(other)) is not one of gzip, bzip2, xz, zstd, lz4"
        }
        if codes.filter({ $0 != ARCHIVE_FILTER_NONE }).count > 1 { return "more than one compression layer" }
        return nil
    }

    static func filterName(_ code: Int32) -> String {
        switch code {
        case ARCHIVE_FILTER_NONE: "none"
        case ARCHIVE_FILTER_GZIP: "gzip"
        case ARCHIVE_FILTER_BZIP2: "bzip2"
        case ARCHIVE_FILTER_XZ: "xz"
        case ARCHIVE_FILTER_ZSTD: "zstd"
        case ARCHIVE_FILTER_LZ4: "lz4"
        default: "filter \(code)"
        }
    }

    fileprivate func read(_ out: UnsafeMutablePointer<UnsafeRawPointer?>) -> Int {
        if isClosed { return 0 }
        reads += 1
        if let reason = bounds.exceeded(checkMemory: reads % Self.memoryCheckInterval == 0) {
            failure = .archiveRefused(archive: bounds.archiveName, entry: nil, reason: reason)
            return -1
        }
        do {
            let count = try valueOrErrno { Glibc.read(fd.rawValue, buffer.baseAddress, buffer.count) }
            out.pointee = UnsafeRawPointer(buffer.baseAddress)
            return count
        } catch {
            failure = .io(path: path, operation: "read", error)
            return -1
        }
    }

    fileprivate func seek(_ offset: Int64, _ whence: Int32) -> Int64 {
        if isClosed { return Int64(ARCHIVE_FATAL) }
        do { return Int64(try valueOrErrno { lseek(fd.rawValue, off_t(offset), whence) }) } catch {
            failure = .io(path: path, operation: "seek", error)
            return Int64(ARCHIVE_FATAL)
        }
    }
}

// libarchive's callbacks: plain functions (not closures, not actor-isolated; STYLE.md's C interop notes).
private func readArchiveSource(
    _: OpaquePointer?, _ context: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<UnsafeRawPointer?>?
) -> la_ssize_t {
    Unmanaged<ArchiveSource>.fromOpaque(context!).takeUnretainedValue().read(out!)
}

private func seekArchiveSource(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?, _ offset: la_int64_t, _ whence: Int32)
    -> la_int64_t
{
    Unmanaged<ArchiveSource>.fromOpaque(context!).takeUnretainedValue().seek(offset, whence)
}

/// The deadline and memory bound of one unpack (`UnpackLimits.deadline`, `.maxMemoryGrowth`).
struct UnpackBounds {
    let archiveName: String
    let limits: UnpackLimits
    private let start = ContinuousClock.now
    private let baseline: Int64

    init(archiveName: String, limits: UnpackLimits) {
        self.archiveName = archiveName
        self.limits = limits
        baseline = Self.residentBytes() ?? 0
    }

    /// Why the unpack must end now, or nil.
    func exceeded(checkMemory: Bool) -> String? {
        let elapsed = ContinuousClock.now - start
        if elapsed > .milliseconds(Int64(limits.deadline * 1000)) {
            return "unpack deadline of \(Self.seconds(limits.deadline)) s passed"
        }
        if checkMemory, let now = Self.residentBytes(), now - baseline > limits.maxMemoryGrowth {
            return "unpack memory bound of \(limits.maxMemoryGrowth >> 20) MiB exceeded: resident memory grew by "
                + "\((now - baseline) >> 20) MiB"
        }
        return nil
    }

    private static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    /// The process's resident set, from the second field of /proc/self/statm (pages).
    static func residentBytes() -> Int64? {
        let fd = Glibc.open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var text = [UInt8](repeating: 0, count: 128)
        let count = text.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let fields = text[0..<count].split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = Int64(String(decoding: fields[1], as: UTF8.self)) else { return nil }
        return pages * Int64(sysconf(Int32(_SC_PAGESIZE)))
    }
}
