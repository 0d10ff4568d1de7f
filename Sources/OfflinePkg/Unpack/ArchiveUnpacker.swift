internal import CArchive

#if canImport(Glibc)
import Glibc
#endif

/// Unpacks an archive (any format libarchive reads, recognised by content) into a staging folder,
/// streaming, hashing each file as it is written, and refusing the whole archive on anything SPEC §3
/// forbids. Each entry is checked here first; libarchive's secure-extraction flags stand behind that
/// as a second line of defence.
package struct ArchiveUnpacker {
    package var limits: UnpackLimits
    /// The archive's name in error messages (its URL as the manifest wrote it).
    package var archiveName: String
    /// Deltas carry `.offlinepkg-delta.json` at their root; full archives may not.
    package var isDelta: Bool = false

    package init(limits: UnpackLimits, archiveName: String, isDelta: Bool = false) {
        self.limits = limits
        self.archiveName = archiveName
        self.isDelta = isDelta
    }

    private func refuse(_ entry: PackagePath?, _ reason: String) -> OfflinePkgError {
        .archiveRefused(archive: archiveName, entry: entry, reason: reason)
    }

    /// Unpacks the archive at `archivePath` into `destination`, an existing folder. For a delta,
    /// `destination` already holds the old tree (hard-linked) and changed files replace their links.
    package func unpack(archivePath: String, into destination: String) throws -> UnpackedTree {
        // Names are bytes (SPEC §3): under the C locale libarchive converts none (see ArchiveEntryName).
        let previousLocale = CLocale.activate()
        defer { CLocale.restore(previousLocale) }
        guard let reader = archive_read_new() else { throw refuse(nil, "libarchive could not allocate a reader") }
        defer { archive_read_free(reader) }
        archive_read_support_filter_all(reader)
        archive_read_support_format_all(reader)
        // Raw and empty formats would accept any file as "an archive of one entry"; leave them out.
        guard archive_read_open_filename(reader, archivePath, 256 << 10) == ARCHIVE_OK else {
            throw refuse(nil, "not a readable archive: \(Self.errorString(reader))")
        }
        guard let writer = archive_write_disk_new() else { throw refuse(nil, "libarchive could not allocate a writer") }
        defer { archive_write_free(writer) }
        let flags = ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK
        archive_write_disk_set_options(writer, flags)

        var state = UnpackState()
        var names = ArchiveEntryName(archivePath: archivePath, archiveName: archiveName)
        while true {
            var entryPointer: OpaquePointer?
            let status = archive_read_next_header(reader, &entryPointer)
            if status == ARCHIVE_EOF { break }
            guard status == ARCHIVE_OK || status == ARCHIVE_WARN, let entry = entryPointer else {
                throw refuse(nil, "damaged archive: \(Self.errorString(reader))")
            }
            let raw = try names.next(entry, reader: reader)
            let path = try check(entry: entry, raw: raw, state: &state)
            guard let path else { continue }  // the archive root "./"

            if archive_entry_filetype(entry) == EntryType.directory {
                try makeFolder(path, in: destination, entry: raw, state: &state)
                continue
            }
            if path == ArchivePath.deltaControlPath {
                state.deltaControl = try readControl(reader, entry: raw)
                continue
            }
            let file = try writeFile(reader, writer, entry: entry, raw: raw, path: path, destination: destination, state: &state)
            state.files[path] = file
        }
        if let end = names.extendedTarHeadersEnd { try TarExtendedHeaders.check(archivePath, upTo: end, archiveName: archiveName) }
        if isDelta && state.deltaControl == nil {
            throw refuse(nil, "a delta must hold \(ArchivePath.deltaControlName) at its root")
        }
        if state.entries == 0 { throw refuse(nil, "not an archive, or an empty one") }
        return UnpackedTree(files: state.files, folders: state.made, deltaControl: state.deltaControl)
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
        if archive_entry_hardlink(entry) != nil { throw refuse(raw, "hard link") }
        switch type {
        case EntryType.regular, EntryType.directory: break
        case EntryType.symlink: throw refuse(raw, "symbolic link")
        case EntryType.character, EntryType.block: throw refuse(raw, "device node")
        case EntryType.fifo: throw refuse(raw, "FIFO")
        case EntryType.socket: throw refuse(raw, "socket")
        default: throw refuse(raw, "unsupported entry type")
        }
        if archive_entry_mode(entry) & 0o7000 != 0 { throw refuse(raw, "setuid, setgid or sticky bit") }
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

    /// Creates the folder `path` (relative to `destination`) and its parents, once: archives list a
    /// folder's files together, so remembering what was made saves an lstat and a mkdir per file.
    private func makeFolder(_ path: PackagePath, in destination: String, entry: PackagePath, state: inout UnpackState) throws {
        if path.isEmpty || state.made.contains(path) { return }
        do { try FileSystem.makeDirectories(destination + "/" + path.string) } catch {
            throw refuse(entry, "cannot create folder: \(error)")
        }
        var folder = path
        while state.made.insert(folder).inserted, let parent = folder.parent {
            folder = parent
        }
    }

    private func readControl(_ reader: OpaquePointer, entry: PackagePath) throws -> [UInt8] {
        var control = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { archive_read_data(reader, $0.baseAddress, $0.count) }
            if count == 0 { return control }
            if count < 0 { throw refuse(entry, "damaged data: \(Self.errorString(reader))") }
            control.append(contentsOf: chunk[0..<count])
            if control.count > 16 << 20 { throw refuse(entry, "delta control file larger than 16 MiB") }
        }
    }

    private func writeFile(
        _ reader: OpaquePointer, _ writer: OpaquePointer, entry: OpaquePointer, raw: PackagePath, path: PackagePath,
        destination: String, state: inout UnpackState
    ) throws -> TreeFile {
        // Parents may be implied rather than listed; create them as plain folders.
        try makeFolder(path.parent ?? "", in: destination, entry: raw, state: &state)
        let target = destination + "/" + path.string
        // A delta replaces a hard link to the old tree: unlink first so the old tree is never written
        // through. A full archive unpacks into an empty folder and duplicates are refused: nothing to unlink.
        if isDelta { FileSystem.removeFile(target) }
        archive_entry_set_pathname(entry, target)
        archive_entry_set_perm(entry, 0o444)
        archive_entry_set_uid(entry, 0)
        archive_entry_set_gid(entry, 0)
        archive_entry_set_uname(entry, nil as UnsafePointer<CChar>?)
        archive_entry_set_gname(entry, nil as UnsafePointer<CChar>?)
        archive_entry_unset_size(entry)
        guard archive_write_header(writer, entry) == ARCHIVE_OK else {
            throw refuse(raw, "cannot write: \(Self.errorString(writer))")
        }
        let hasher = SHA256()
        var size: Int64 = 0
        var block: UnsafeRawPointer?
        var blockSize = 0
        var offset: la_int64_t = 0
        while true {
            let status = archive_read_data_block(reader, &block, &blockSize, &offset)
            if status == ARCHIVE_EOF { break }
            guard status == ARCHIVE_OK || status == ARCHIVE_WARN else {
                throw refuse(raw, "damaged data: \(Self.errorString(reader))")
            }
            // Sparse members carry holes: the offset jumps ahead. Unpacked files are plain, so refuse them.
            guard offset == size else { throw refuse(raw, "sparse file") }
            size += Int64(blockSize)
            state.bytes += Int64(blockSize)
            if state.bytes > limits.maxBytes {
                throw refuse(raw, "unpacks to more than \(limits.maxBytes) bytes")
            }
            let buffer = UnsafeRawBufferPointer(start: block, count: blockSize)
            hasher.update(buffer)
            guard archive_write_data_block(writer, block, blockSize, offset) >= 0 else {
                throw refuse(raw, "cannot write: \(Self.errorString(writer))")
            }
        }
        guard archive_write_finish_entry(writer) == ARCHIVE_OK else {
            throw refuse(raw, "cannot finish: \(Self.errorString(writer))")
        }
        return TreeFile(sha256: hasher.finalize().hex, size: size)
    }

    private static func errorString(_ archive: OpaquePointer) -> String {
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
    var files: [PackagePath: TreeFile] = [:]
    /// Folders created on disk (relative paths), listed or implied by a file's path.
    var made: Set<PackagePath> = []
    var deltaControl: [UInt8]?
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
