internal import CArchive

#if canImport(Glibc)
import Glibc
#endif

/// Unpacks an archive (tar, optionally gzip/bzip2/xz/zstd/lz4, or zip, recognised by content) into a
/// staging folder, streaming, hashing each file as it is written, and refusing the whole archive on
/// anything docs/protocol.md#archives forbids. Each entry is checked here first; `TreeWriter`, which cannot follow a link,
/// stands behind that as a second line of defence. Every libarchive warning refuses the archive.
/// `verify` runs all of it but the writing: the publisher's check of what devices would refuse.
package struct ArchiveUnpacker {
    package var limits: UnpackLimits
    /// The archive's name in error messages (its URL as the manifest wrote it).
    package var archiveName: String
    /// Deltas carry `.offlinepkg-delta.json` at their root; full archives may not.
    package var isDelta: Bool = false
    /// Runs for each file once written and hashed, with its writer, path, sha256 and size: the sync keeps it
    /// by content there (`ContentStore.insert`, a layer above). Nil writes plain files only (the
    /// publisher, tests of the format rules).
    package var keepFile: ((TreeWriter, PackagePath, TreeFile) throws -> Void)?
    /// Runs for each file read whole, once hashed and before it is created, with its writer, path,
    /// sha256 and size: true when it made the path a link to those bytes, held already (the sync's
    /// `ContentStore.linkHeld`), so the file is neither written nor kept. Nil writes every file.
    package var reuseFile: ((TreeWriter, PackagePath, TreeFile) throws -> Bool)?
    /// Runs once the archive has been read to its end and its file closed, while the lanes may still be
    /// writing: the installer deletes the download there and starts flushing the tree early.
    package var archiveRead: (() -> Void)?

    package init(
        limits: UnpackLimits, archiveName: String, isDelta: Bool = false,
        keepFile: ((TreeWriter, PackagePath, TreeFile) throws -> Void)? = nil,
        reuseFile: ((TreeWriter, PackagePath, TreeFile) throws -> Bool)? = nil
    ) {
        self.limits = limits
        self.archiveName = archiveName
        self.isDelta = isDelta
        self.keepFile = keepFile
        self.reuseFile = reuseFile
    }

    /// Linux's PATH_MAX less its NUL, and NAME_MAX.
    static let maxPathBytes = 4095
    static let maxNameBytes = 255

    private func refuse(_ entry: PackagePath?, _ reason: String) -> OfflinePkgError {
        .archiveRefused(archive: archiveName, entry: entry, reason: reason)
    }

    /// Unpacks the archive at `archivePath` into `destination`, an existing folder. For a delta,
    /// `destination` already holds the old tree (hard-linked) and changed files replace their links.
    package func unpack(archivePath: String, into destination: String) throws -> UnpackedTree {
        try run(archivePath: archivePath, target: .tree(root: destination, replacesFiles: isDelta))
    }

    /// Reads the archive at `archivePath` as `unpack` does, with every rule, limit and bound it applies,
    /// and hashes every file as `unpack` would write it, creating nothing: the tree it returns is the
    /// one `unpack` would write, and it throws what `unpack` would refuse, but for what only writing can
    /// meet: a full disk, a name the device's file system will not take (such as two names that differ
    /// only in case on one that folds case), and for a delta a path the old tree holds as the other kind
    /// of entry. `keepFile` and `reuseFile` do not run. Its memory is `unpack`'s: a large file streams
    /// through its lane in pieces.
    package func verify(archivePath: String) throws -> UnpackedTree {
        try run(archivePath: archivePath, target: .hashOnly)
    }

    private func run(archivePath: String, target: WriterLanes.Target) throws -> UnpackedTree {
        // Names are bytes (docs/protocol.md#conventions): under the C locale libarchive converts none (see ArchiveEntryName).
        let previousLocale = CLocale.activate()
        defer { CLocale.restore(previousLocale) }
        // The turn first (`LaneBudget`): the deadline and the memory bound count from when this unpack reads.
        let budgeted = laneCount == nil
        let count = laneCount ?? laneBudget.begin(wanted: WriterLanes.defaultCount)
        defer { if budgeted { laneBudget.end() } }
        guard let reader = archive_read_new() else { throw refuse(nil, "libarchive could not allocate a reader") }
        defer { archive_read_free(reader) }
        // Once libarchive is loaded, and before the bound's baseline: what is dropped is not room to grow.
        startupPages.dropIfArmed()
        let bounds = UnpackBounds(archiveName: archiveName, limits: limits)
        let source = try ArchiveSource(path: archivePath, bounds: bounds)
        if let reason = try source.open(reader) { throw refuse(nil, reason) }
        let lanes = try WriterLanes(
            target: target, count: count, archiveName: archiveName, bounds: bounds, keepFile: keepFile, reuseFile: reuseFile)
        let filters = archive_filter_count(reader)

        var state = UnpackState()
        do {
            try readEntries(reader, source: source, lanes: lanes, archivePath: archivePath, filters: filters, state: &state)
            if let end = state.extendedTarHeadersEnd {
                try TarExtendedHeaders.check(archivePath, upTo: end, archiveName: archiveName)
            }
        } catch {
            // No lane may still be creating in the folder the caller is about to remove.
            lanes.stop()
            throw error
        }
        // Read to its end: the file is let go while the lanes still write what was handed over.
        archive_read_close(reader)
        source.close()
        archiveRead?()
        let files = try lanes.finish()
        if isDelta && state.deltaControl == nil {
            throw refuse(nil, "a delta must hold \(ArchivePath.deltaControlName) at its root")
        }
        if state.entries == 0 { throw refuse(nil, "not an archive, or an empty one") }
        return UnpackedTree(
            files: files, folders: state.made, deltaControl: state.deltaControl, writerThreads: lanes.threadCount)
    }

    /// The lanes that write files (`WriterLanes`, 0: the reading thread writes); nil takes them from
    /// `laneBudget`. Settable so a test can pin them.
    package var laneCount: Int?
    /// Shares the cores among the unpacks running together (`LaneBudget`).
    package var laneBudget = LaneBudget.shared
    /// Drops start-up's pages before the first unpack of a process that asked for it (`StartupPages`).
    package var startupPages = StartupPages.shared

    /// Reads, checks and hands over every entry of the archive in order.
    private func readEntries(
        _ reader: OpaquePointer, source: ArchiveSource, lanes: WriterLanes, archivePath: String, filters: Int32,
        state: inout UnpackState
    ) throws {
        var names = ArchiveEntryName(archivePath: archivePath, archiveName: archiveName)
        defer { state.extendedTarHeadersEnd = names.extendedTarHeadersEnd }
        while true {
            var entryPointer: OpaquePointer?
            let status = archive_read_next_header(reader, &entryPointer)
            if status == ARCHIVE_EOF { break }
            guard status == ARCHIVE_OK || status == ARCHIVE_WARN, let entry = entryPointer else {
                throw source.failure ?? refuse(nil, "damaged archive: \(Self.errorString(reader))")
            }
            // The format first: a zip's names are read from its own headers, which a compressed zip hides.
            try checkFormat(reader, filters: filters, entry: nil)
            let raw = try names.next(entry, reader: reader)
            let path = try check(entry: entry, raw: raw, state: &state)
            // A warning (a bad checksum, a malformed pax attribute, a name that did not convert...) is a
            // damaged header: refused, after the entry's own rules had their say.
            // Under the C locale every non-ASCII pax or UTF-8-flagged zip name warns that it did not
            // convert: harmless, the name was read as bytes and checked above.
            if status == ARCHIVE_WARN && !ArchiveEntryName.isNameConversionWarning(Self.errorString(reader)) {
                throw refuse(raw, "damaged header: \(Self.errorString(reader))")
            }
            guard let path else { continue }  // the archive root "./"

            if archive_entry_filetype(entry) == EntryType.directory {
                if !state.made.contains(path) {
                    noteFolder(path, state: &state)
                    try lanes.send(.folder(path, raw: raw), to: lanes.lane(for: path))
                }
                continue
            }
            if path == ArchivePath.deltaControlPath {
                state.deltaControl = try readControl(reader, source: source, entry: raw)
                continue
            }
            try sendFile(reader, lanes, entry: entry, raw: raw, path: path, source: source, state: &state)
        }
    }

    /// Applies every per-entry rule; returns the clean path, or nil for the archive's root folder.
    private func check(entry: OpaquePointer, raw: PackagePath, state: inout UnpackState) throws -> PackagePath? {
        state.entries += 1
        if state.entries > limits.maxEntries {
            throw refuse(raw, "more than \(limits.maxEntries) entries")
        }
        let path: PackagePath
        switch ArchivePath.normalize(raw.bytes) {
        case .failure(let reason): throw refuse(raw, reason)
        case .success(let clean): path = clean
        }
        let type = archive_entry_filetype(entry)
        // The link fields count whatever the type says: a "regular" entry carrying a target is a link.
        if archive_entry_hardlink(entry) != nil || archive_entry_hardlink_utf8(entry) != nil
            || archive_entry_hardlink_w(entry) != nil
        {
            throw refuse(raw, "hard link")
        }
        if archive_entry_symlink(entry) != nil || archive_entry_symlink_utf8(entry) != nil
            || archive_entry_symlink_w(entry) != nil
        {
            throw refuse(raw, "symbolic link")
        }
        switch type {
        case EntryType.regular, EntryType.directory: break
        case EntryType.symlink: throw refuse(raw, "symbolic link")
        case EntryType.character, EntryType.block: throw refuse(raw, "device node")
        case EntryType.fifo: throw refuse(raw, "FIFO")
        case EntryType.socket: throw refuse(raw, "socket")
        default: throw refuse(raw, "unsupported entry type")
        }
        if archive_entry_mode(entry) & 0o7000 != 0 { throw refuse(raw, "setuid, setgid or sticky bit") }
        if archive_entry_sparse_count(entry) > 0 { throw refuse(raw, "sparse file") }
        if archive_entry_is_encrypted(entry) != 0 { throw refuse(raw, "encrypted entry") }
        // Longer names than Linux takes would fail as a disk error later; they are the archive's fault.
        if raw.bytes.count > Self.maxPathBytes { throw refuse(raw, "path longer than \(Self.maxPathBytes) bytes") }
        if path.bytes.split(separator: UInt8(ascii: "/")).contains(where: { $0.count > Self.maxNameBytes }) {
            throw refuse(raw, "a name longer than \(Self.maxNameBytes) bytes")
        }
        let isDirectory = type == EntryType.directory
        if path.isEmpty {
            if isDirectory { return nil }
            throw refuse(raw, "empty path")
        }
        if path == ArchivePath.deltaControlPath && (!isDelta || isDirectory) {
            throw refuse(raw, "reserved name outside a delta")
        }
        if path.hasSuffix(PackagePath("/" + ArchivePath.deltaControlName)) { throw refuse(raw, "reserved name") }
        switch (state.kinds[path], isDirectory) {
        case (nil, _): break
        // A folder already implied by a file inside it may still be listed once, after that file.
        case (.impliedFolder, true): break
        case (.folder, true), (.file, false): throw refuse(raw, "duplicate path")
        default: throw refuse(raw, "path is both a file and a folder")
        }
        // Every parent must be (or become) a folder, never a file.
        var parent = path
        while let key = parent.parent {
            parent = key
            if let kind = state.kinds[key] {
                if kind == .file { throw refuse(raw, "path is both a file and a folder") }
                break
            }
            state.kinds[key] = .impliedFolder
        }
        state.kinds[path] = isDirectory ? .folder : .file
        return path
    }

    /// Remembers that `path` and its parents exist (or will, once its lane reaches it), for
    /// `makeFoldersReadOnly`: a lane creates a file's missing parents as it opens them.
    private func noteFolder(_ path: PackagePath, state: inout UnpackState) {
        if path.isEmpty || state.made.contains(path) { return }
        var folder = path
        while state.made.insert(folder).inserted, let parent = folder.parent {
            folder = parent
        }
    }

    private func readControl(_ reader: OpaquePointer, source: ArchiveSource, entry: PackagePath) throws -> [UInt8] {
        var control = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { archive_read_data(reader, $0.baseAddress, $0.count) }
            if count == 0 { return control }
            if count < 0 { throw source.failure ?? refuse(entry, "damaged data: \(Self.errorString(reader))") }
            control.append(contentsOf: chunk[0..<count])
            if control.count > 16 << 20 { throw refuse(entry, "delta control file larger than 16 MiB") }
        }
    }

    /// Reads one file's data, checking it block by block, and hands it to the lane of its folder: whole
    /// when it is small, else in pieces as it is read.
    private func sendFile(
        _ reader: OpaquePointer, _ lanes: WriterLanes, entry: OpaquePointer, raw: PackagePath, path: PackagePath,
        source: ArchiveSource, state: inout UnpackState
    ) throws {
        let folder = path.parent ?? ""
        noteFolder(folder, state: &state)
        let lane = lanes.lane(for: folder)
        let declared: Int64? = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : nil
        let pieceLimit = WriterLanes.wholeFileLimit
        var pending = [UInt8]()
        pending.reserveCapacity(Int(min(declared ?? 0, Int64(pieceLimit))))
        var streaming = false
        var size: Int64 = 0
        var block: UnsafeRawPointer?
        var blockSize = 0
        var offset: la_int64_t = 0
        var blocks = 0
        while true {
            let status = archive_read_data_block(reader, &block, &blockSize, &offset)
            if status == ARCHIVE_EOF { break }
            guard status == ARCHIVE_OK else {
                throw source.failure ?? refuse(raw, "damaged data: \(Self.errorString(reader))")
            }
            // A decompressor can grow without reading (zstd's window fills as it inflates), so
            // the memory bound is checked here too, every 16 blocks.
            blocks += 1
            if let reason = source.bounds.exceeded(checkMemory: blocks % 16 == 0) { throw refuse(nil, reason) }
            // Sparse members carry holes: the offset jumps ahead. Unpacked files are plain, so refuse them.
            guard offset == size else { throw refuse(raw, "sparse file") }
            size += Int64(blockSize)
            if let declared, size > declared {
                throw refuse(raw, "more data than the \(declared) bytes its header declares")
            }
            state.bytes += Int64(blockSize)
            if state.bytes > limits.maxBytes {
                throw refuse(raw, "unpacks to more than \(limits.maxBytes) bytes")
            }
            // A larger file streams in pieces of exactly `pieceLimit` bytes: each piece is filled to the
            // capacity it reserved and no further (an array appended past it doubles), so the bytes a
            // lane's queue counts are the bytes it holds.
            var bytes = UnsafeRawBufferPointer(start: block, count: blockSize)
            while pending.count + bytes.count > pieceLimit {
                let room = pieceLimit - pending.count
                pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes.prefix(room)))
                bytes = UnsafeRawBufferPointer(rebasing: bytes.dropFirst(room))
                if !streaming {
                    try lanes.send(.begin(path, raw: raw), to: lane)
                    streaming = true
                }
                try lanes.send(.chunk(pending), to: lane)
                pending = []
                pending.reserveCapacity(pieceLimit)
            }
            pending.append(contentsOf: bytes)
        }
        // A trailing hole, or data that stopped short of what the header promised.
        if let declared, size != declared { throw refuse(raw, "holds \(size) bytes, its header declares \(declared)") }
        if streaming {
            if !pending.isEmpty { try lanes.send(.chunk(pending), to: lane) }
            try lanes.send(.end, to: lane)
        } else {
            try lanes.send(.file(path, raw: raw, pending), to: lane)
        }
    }

    /// Refuses an entry that is not from the tar or zip reader, or a zip that came through a compression
    /// filter (docs/protocol.md#archives allows compression for tar only).
    private func checkFormat(_ reader: OpaquePointer, filters: Int32, entry: PackagePath?) throws {
        switch archive_format(reader) & ARCHIVE_FORMAT_BASE_MASK {
        case ARCHIVE_FORMAT_TAR: return
        case ARCHIVE_FORMAT_ZIP where filters <= 1: return
        case ARCHIVE_FORMAT_ZIP: throw refuse(entry, "a compressed zip: only a tar may be compressed")
        default: throw refuse(entry, "format \(Self.formatName(reader)) is neither tar nor zip")
        }
    }

    private static func formatName(_ reader: OpaquePointer) -> String {
        archive_format_name(reader).map { String(cString: $0) } ?? "unknown"
    }

    static func errorString(_ archive: OpaquePointer) -> String {
        archive_error_string(archive).map { String(cString: $0) } ?? "unknown error"
    }
}

private enum PathKind {
    case file
    /// Listed as a folder entry.
    case folder
    /// Not listed (yet), but the parent of a listed path.
    case impliedFolder
}

private struct UnpackState {
    var entries = 0
    var bytes: Int64 = 0
    /// What each path seen is: finds duplicates and file/folder conflicts in one pass.
    var kinds: [PackagePath: PathKind] = [:]
    /// Folders created on disk (relative paths), listed or implied by a file's path.
    var made: Set<PackagePath> = []
    var deltaControl: [UInt8]?
    var extendedTarHeadersEnd: Int64?
}

/// libarchive's `AE_IF*` file types. They are macros with a cast, which Swift does not import.
private enum EntryType {
    static let regular: mode_t = 0o100000
    static let directory: mode_t = 0o040000
    static let symlink: mode_t = 0o120000
    static let character: mode_t = 0o020000
    static let block: mode_t = 0o060000
    static let fifo: mode_t = 0o010000
    static let socket: mode_t = 0o140000
}
