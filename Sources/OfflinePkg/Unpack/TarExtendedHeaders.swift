internal import CArchive

/// A second look at a tar's extended headers (pax `x`/`g` records, GNU `L`/`K` long names), which
/// libarchive reads as C strings: a pax `path=ok\0/../../../evil` reaches the unpacker as `ok`. This
/// reads the decompressed stream itself and refuses a name or link target holding a NUL, so that an
/// archive means one thing to every reader. It runs only for archives that have such headers.
enum TarExtendedHeaders {
    /// Whether the tar entry just read took more than its one 512-byte header block: libarchive
    /// records where the entry's headers started and has consumed them all when it returns.
    static func hadExtendedHeader(_ reader: OpaquePointer) -> Bool {
        archive_format(reader) & ARCHIVE_FORMAT_BASE_MASK == ARCHIVE_FORMAT_TAR
            && archive_filter_bytes(reader, 0) - archive_read_header_position(reader) > 512
    }

    /// Throws when an extended header of the tar at `path`, in its first `end` decompressed bytes,
    /// holds a name with a NUL in it.
    static func check(_ path: String, upTo end: Int64, archiveName: String) throws {
        guard let reader = archive_read_new() else { throw refuse(archiveName, nil, "libarchive could not allocate a reader") }
        defer { archive_read_free(reader) }
        for add in [archive_read_support_filter_gzip, archive_read_support_filter_bzip2, archive_read_support_filter_xz,
            archive_read_support_filter_zstd, archive_read_support_filter_lz4] { _ = add(reader) }
        archive_read_support_format_raw(reader)
        var entry: OpaquePointer?
        guard archive_read_open_filename(reader, path, 256 << 10) == ARCHIVE_OK,
            archive_read_next_header(reader, &entry) == ARCHIVE_OK
        else { throw refuse(archiveName, nil, "damaged archive: its tar headers cannot be read again") }
        var scanner = Scanner()
        var chunk = [UInt8](repeating: 0, count: 256 << 10)
        var read: Int64 = 0
        while read < end {
            let count = chunk.withUnsafeMutableBytes { archive_read_data(reader, $0.baseAddress, $0.count) }
            if count == 0 { break }
            guard count > 0 else { throw refuse(archiveName, nil, "damaged archive: its tar headers cannot be read again") }
            if let name = scanner.feed(chunk[0..<count]) {
                throw refuse(archiveName, PackagePath(bytes: name), "NUL byte in path")
            }
            read += Int64(count)
            if scanner.finished { break }
        }
    }

    private static func refuse(_ archive: String, _ entry: PackagePath?, _ reason: String) -> OfflinePkgError {
        .archiveRefused(archive: archive, entry: entry, reason: reason)
    }

    /// Walks 512-byte tar blocks: a header, then its data (kept only for extended headers, skipped
    /// otherwise), up to the first zero block.
    struct Scanner {
        private var block = [UInt8]()
        /// Bytes of data still to skip or collect after the current header.
        private var remaining = 0
        private var collecting: UInt8?
        private var collected = [UInt8]()
        private var dataSize = 0
        private(set) var finished = false

        /// Feeds more of the stream; returns a name holding a NUL once one is seen.
        mutating func feed(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
            var input = bytes
            while !input.isEmpty && !finished {
                if remaining > 0 {
                    let take = min(remaining, input.count)
                    if collecting != nil { collected.append(contentsOf: input.prefix(take)) }
                    input = input.dropFirst(take)
                    remaining -= take
                    if remaining == 0, let type = collecting {
                        collecting = nil
                        if let name = Self.nameWithNUL(in: Array(collected.prefix(dataSize)), type: type) { return name }
                    }
                    continue
                }
                let take = min(512 - block.count, input.count)
                block.append(contentsOf: input.prefix(take))
                input = input.dropFirst(take)
                if block.count == 512 { header() }
            }
            return nil
        }

        private mutating func header() {
            defer { block.removeAll(keepingCapacity: true) }
            if block.allSatisfy({ $0 == 0 }) {
                finished = true
                return
            }
            let size = Self.size(block[124..<136])
            let type = block[156]
            // Extended headers are small (libarchive refuses pax records over 1 MB); a larger one is
            // skipped here and left to libarchive, which has refused or read it already.
            let extended = [UInt8(ascii: "x"), UInt8(ascii: "g"), UInt8(ascii: "L"), UInt8(ascii: "K")].contains(type)
            collecting = extended && size > 0 && size <= 8 << 20 ? type : nil
            collected.removeAll(keepingCapacity: true)
            dataSize = size
            remaining = (size + 511) / 512 * 512
        }

        /// A tar size field: octal digits, or base-256 when the high bit of the first byte is set.
        static func size(_ field: ArraySlice<UInt8>) -> Int {
            if let first = field.first, first & 0x80 != 0 {
                return field.dropFirst().suffix(7).reduce(0) { $0 << 8 | Int($1) }
            }
            var value = 0
            for byte in field where (0x30...0x37).contains(byte) { value = value << 3 | Int(byte - 0x30) }
            return value
        }

        /// The pax `path`/`linkpath` value, or the GNU long name, that holds a NUL; nil when none does.
        static func nameWithNUL(in data: [UInt8], type: UInt8) -> [UInt8]? {
            if type == UInt8(ascii: "L") || type == UInt8(ascii: "K") {
                // The name, then NUL padding: a NUL before its last other byte is inside the name.
                guard let last = data.lastIndex(where: { $0 != 0 }) else { return nil }
                let name = Array(data[...last])
                return name.contains(0) ? name : nil
            }
            var records = data[...]
            while let space = records.firstIndex(of: 0x20) {
                let digits = records[..<space]
                guard !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }), digits.count < 8 else { return nil }
                let length = digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
                guard length > digits.count + 1, records.startIndex + length <= records.endIndex else { return nil }
                let record = records[(space + 1)..<(records.startIndex + length - 1)]  // without the newline
                records = records[(records.startIndex + length)...]
                guard let equals = record.firstIndex(of: UInt8(ascii: "=")) else { continue }
                let key = record[..<equals], value = record[(equals + 1)...]
                let names = ["path", "linkpath", "GNU.sparse.name"]
                if value.contains(0), names.contains(where: { key.elementsEqual($0.utf8) }) {
                    return Array(value)
                }
            }
            return nil
        }
    }
}
