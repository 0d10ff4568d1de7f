internal import CArchive

/// Where a package's file index is (docs/protocol.md#chunked-archives-and-file-indexes): the manifest's `archive.files`, covered by its signature.
/// `sha256` and `size` are those of the compressed `files/<sha256>.json.zst`.
package struct FileIndexReference: Codable, Sendable, Equatable {
    /// As written in the manifest: absolute, or relative to the manifest URL.
    package var url: String
    package var sha256: String
    package var size: Int64

    package init(url: String, sha256: String, size: Int64) {
        self.url = url
        self.sha256 = sha256
        self.size = size
    }
}

/// The file index of a chunked archive (docs/protocol.md#chunked-archives-and-file-indexes): one entry per regular file of the package, sorted by
/// the bytes of its path (the tree hash's order), with the byte range of the compressed archive that
/// holds the member's zstd frames. Decompressing exactly that range gives a tar stream of that one
/// member: its header block(s), its data and its padding, no end-of-archive blocks.
package struct FileIndex: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        package var path: PackagePath
        /// Of the file's bytes (what the tree hash lists), lowercase hex.
        package var sha256: String
        /// Of the file's bytes.
        package var size: Int64
        /// Where the member's first frame starts in the compressed archive.
        package var offset: Int64
        /// The bytes of the member's frames, from `offset`.
        package var length: Int64

        package init(path: PackagePath, sha256: String, size: Int64, offset: Int64, length: Int64) {
            self.path = path
            self.sha256 = sha256
            self.size = size
            self.offset = offset
            self.length = length
        }
    }

    package var entries: [Entry]

    /// A decompressed index larger than this is refused: a million files (the unpack limit's default)
    /// with long paths stay well under it.
    package static let maximumSize = 256 << 20

    package init(entries: [Entry]) {
        self.entries = entries
    }

    /// Parses and checks an index for an archive of `archiveSize` bytes; `source` names it in errors.
    /// Strict, as a signed document is read: our JSON reader (duplicate keys refused), every path by the
    /// rules of archive members, sorted by path bytes with no duplicates, no path both a file and a
    /// folder, every range inside the archive and no two ranges overlapping.
    package static func decode(json: [UInt8], archiveSize: Int64, source: String) throws -> FileIndex {
        let (document, fail) = try parse(json, source: source)
        guard let list = document.root.array else { throw fail("(document)", "expected a JSON list") }
        return FileIndex(entries: try decode(list: list, field: "", archiveSize: archiveSize, fail: fail))
    }

    /// The JSON of an index or an index delta, no larger than `maximumSize`, and the error maker for
    /// its fields.
    static func parse(_ json: [UInt8], source: String) throws -> (JSONDocument, (String, String) -> OfflinePkgError) {
        let fail = { (field: String, reason: String) -> OfflinePkgError in
            .invalidFileIndex(source: source, field: field, reason: reason)
        }
        guard json.count <= maximumSize else { throw fail("(document)", "larger than \(maximumSize) bytes") }
        do {
            return (try JSONDocument(parsing: json), fail)
        } catch {
            throw fail(error.path.isEmpty ? "(document)" : error.path, error.reason)
        }
    }

    /// The entries of `list` (a JSON list of file objects, at `field` in its document), by the rules of
    /// `decode(json:…)`.
    static func decode(
        list: [JSONValue], field prefix: String, archiveSize: Int64, fail: (String, String) -> OfflinePkgError
    ) throws -> [Entry] {
        var entries = [Entry]()
        entries.reserveCapacity(list.count)
        for (index, item) in list.enumerated() {
            let field = "\(prefix)[\(index)]"
            guard let object = item.object else { throw fail(field, "expected an object") }
            guard let text = object["path"]?.string else { throw fail("\(field).path", "expected a string") }
            let path = PackagePath(text)
            if let problem = ArchivePath.validate(path.bytes) {
                throw fail("\(field).path", "\"\(path)\": \(problem)")
            }
            if path == ArchivePath.deltaControlPath {
                throw fail("\(field).path", "\"\(path)\" is reserved for deltas")
            }
            guard let sha256 = object["sha256"]?.string, Hex.isLowercase(sha256, count: 64) else {
                throw fail("\(field).sha256", "expected 64 lowercase hex digits")
            }
            func integer(_ key: String, minimum: Int64) throws -> Int64 {
                guard let (literal, isInteger) = object[key]?.number, isInteger, let value = Int64(literal) else {
                    throw fail("\(field).\(key)", "expected an integer")
                }
                guard value >= minimum else { throw fail("\(field).\(key)", "must be at least \(minimum), got \(value)") }
                return value
            }
            let entry = Entry(
                path: path, sha256: sha256, size: try integer("size", minimum: 0),
                offset: try integer("offset", minimum: 0), length: try integer("length", minimum: 1))
            // offset + length without overflow: both are non-negative and archiveSize fits in Int64.
            guard entry.offset <= archiveSize, entry.length <= archiveSize - entry.offset else {
                throw fail(
                    field,
                    "\"\(path)\": range \(entry.offset)+\(entry.length) ends past the archive's \(archiveSize) bytes")
            }
            if let previous = entries.last {
                if previous.path == path { throw fail("\(field).path", "duplicate path \"\(path)\"") }
                if !(previous.path < path) {
                    throw fail("\(field).path", "\"\(path)\" comes after \"\(previous.path)\": not sorted by path bytes")
                }
            }
            entries.append(entry)
        }
        try checkNoFileIsAFolder(entries, prefix, fail)
        try checkRangesDisjoint(entries, prefix, fail)
        return entries
    }

    private static func checkNoFileIsAFolder(_ entries: [Entry], _ prefix: String, _ fail: (String, String) -> OfflinePkgError) throws {
        var files = Set<PackagePath>()
        files.reserveCapacity(entries.count)
        for entry in entries { files.insert(entry.path) }
        for (index, entry) in entries.enumerated() {
            var folder = entry.path.parent
            while let current = folder {
                if files.contains(current) {
                    throw fail("\(prefix)[\(index)].path", "\"\(entry.path)\" is inside \"\(current)\", which is a file")
                }
                folder = current.parent
            }
        }
    }

    private static func checkRangesDisjoint(_ entries: [Entry], _ prefix: String, _ fail: (String, String) -> OfflinePkgError) throws {
        let byOffset = entries.indices.sorted { entries[$0].offset < entries[$1].offset }
        for (before, after) in zip(byOffset, byOffset.dropFirst()) {
            let first = entries[before], second = entries[after]
            if first.offset + first.length > second.offset {
                throw fail(
                    "\(prefix)[\(after)]",
                    "\"\(second.path)\": range \(second.offset)+\(second.length) overlaps the range "
                        + "\(first.offset)+\(first.length) of \"\(first.path)\"")
            }
        }
    }

    /// The index as JSON: one object a line, keys in a fixed order, so the same index gives the same
    /// bytes (and so the same name in `files/`) every time.
    package func encode() -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(entries.count * 160)
        out.append(UInt8(ascii: "["))
        for (index, entry) in entries.enumerated() {
            out.append(contentsOf: index == 0 ? Array("\n".utf8) : Array(",\n".utf8))
            out.append(contentsOf: "{\"path\":".utf8)
            Self.appendString(entry.path.bytes, to: &out)
            out.append(contentsOf: ",\"sha256\":\"\(entry.sha256)\",\"size\":\(entry.size)".utf8)
            out.append(contentsOf: ",\"offset\":\(entry.offset),\"length\":\(entry.length)}".utf8)
        }
        out.append(contentsOf: "\n]\n".utf8)
        return out
    }

    /// A JSON string of UTF-8 bytes: quotes, backslashes and control characters escaped, the rest as is.
    static func appendString(_ bytes: [UInt8], to out: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(byte)
            case 0..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xf)])
            default:
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The JSON of a `files/<sha256>.json.zst` file, decompressed through libarchive's raw format and
    /// zstd filter (the device links no other compressor). Anything but zstd is refused, and so is
    /// output past `maximumSize` bytes, before it is all held.
    package static func decompress(_ compressed: [UInt8], source: String, maximumSize: Int = FileIndex.maximumSize) throws -> [UInt8] {
        func fail(_ reason: String) -> OfflinePkgError {
            .invalidFileIndex(source: source, field: "(file)", reason: reason)
        }
        guard let reader = archive_read_new() else { throw fail("libarchive could not allocate a reader") }
        defer { archive_read_free(reader) }
        guard archive_read_support_filter_zstd(reader) == ARCHIVE_OK, archive_read_support_format_raw(reader) == ARCHIVE_OK
        else { throw fail("libarchive has no zstd support") }
        return try compressed.withUnsafeBytes { buffer -> [UInt8] in
            var entry: OpaquePointer?
            guard archive_read_open_memory(reader, buffer.baseAddress, buffer.count) == ARCHIVE_OK,
                archive_read_next_header(reader, &entry) == ARCHIVE_OK
            else { throw fail("not a zstd stream (\(errorText(reader)))") }
            // Filter 0 is the outermost one read; "none" alone means the bytes were not compressed.
            guard archive_filter_count(reader) == 2, archive_filter_code(reader, 0) == ARCHIVE_FILTER_ZSTD else {
                throw fail("expected zstd-compressed JSON, got \(String(cString: archive_filter_name(reader, 0)))")
            }
            var output = [UInt8]()
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let count = chunk.withUnsafeMutableBytes { archive_read_data(reader, $0.baseAddress, $0.count) }
                if count == 0 { break }
                guard count > 0 else { throw fail("damaged zstd stream (\(errorText(reader)))") }
                guard output.count + count <= maximumSize else {
                    throw fail("decompresses to more than \(maximumSize) bytes")
                }
                output.append(contentsOf: chunk[0..<count])
            }
            return output
        }
    }

    private static func errorText(_ reader: OpaquePointer) -> String {
        archive_error_string(reader).map { String(cString: $0) } ?? "unknown error"
    }
}
