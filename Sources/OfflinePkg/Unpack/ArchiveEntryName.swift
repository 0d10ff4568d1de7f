internal import CArchive

#if canImport(Glibc)
import Glibc
#endif

/// Where the unpacker takes each member's name from, as the archive's bytes: libarchive's own bytes
/// for tar, read under the C locale (a UTF-8 locale makes libarchive normalise pax names to NFC, which
/// merges two files into one), and the zip file's headers for zip (`ZipNames`).
struct ArchiveEntryName {
    let archivePath: String
    let archiveName: String
    private var zipNames: [[UInt8]]?
    private var index = 0
    /// Where (in the decompressed stream) the headers of the last tar entry that came with an extended
    /// header end, or nil when none did: `TarExtendedHeaders` reads the stream again up to there.
    private(set) var extendedTarHeadersEnd: Int64?

    init(archivePath: String, archiveName: String) {
        self.archivePath = archivePath
        self.archiveName = archiveName
    }

    /// The raw name of the entry just read.
    mutating func next(_ entry: OpaquePointer, reader: OpaquePointer) throws -> PackagePath {
        defer { index += 1 }
        if TarExtendedHeaders.hadExtendedHeader(reader) { extendedTarHeadersEnd = archive_filter_bytes(reader, 0) }
        let read = archive_entry_pathname(entry).map { [UInt8](UnsafeRawBufferPointer(start: $0, count: strlen($0))) }
        guard archive_format(reader) & ARCHIVE_FORMAT_BASE_MASK == ARCHIVE_FORMAT_ZIP else {
            return PackagePath(bytes: read ?? [])
        }
        if zipNames == nil {
            guard let names = try ZipNames.read(archivePath) else {
                throw refuse(nil, "damaged archive: its zip central directory cannot be read")
            }
            zipNames = names
        }
        guard let names = zipNames, index < names.count else {
            throw refuse(nil, "damaged archive: more members than its zip central directory lists")
        }
        let name = names[index]
        // libarchive cuts a name at a NUL and drops one it cannot convert; what it did keep must agree.
        if let read, !read.elementsEqual(name.prefix { $0 != 0 }) {
            throw refuse(
                PackagePath(bytes: name), "damaged archive: libarchive reads this member as \"\(PackagePath(bytes: read))\"")
        }
        return PackagePath(bytes: name)
    }

    private func refuse(_ entry: PackagePath?, _ reason: String) -> OfflinePkgError {
        .archiveRefused(archive: archiveName, entry: entry, reason: reason)
    }

    /// Whether a header warning only says that libarchive could not convert a name to the C locale's
    /// charset: names are taken as bytes and checked by `ArchivePath`, so this warning is expected for
    /// every non-ASCII pax or UTF-8-flagged zip name and is no sign of damage.
    static func isNameConversionWarning(_ message: String) -> Bool {
        ["Pathname", "Uname", "Gname"].contains { message.hasPrefix("\($0) can't be converted from ") }
            || message.hasPrefix("Pathname cannot be converted from ")
    }
}

/// The C locale for the calling thread only (`uselocale`), so libarchive converts no name.
enum CLocale {
    // Created once and never freed or changed: safe to share between threads.
    nonisolated(unsafe) private static let locale: locale_t? = newlocale(LC_CTYPE_MASK, "C", nil)

    static func activate() -> locale_t? {
        guard let locale else { return nil }
        return uselocale(locale)
    }

    static func restore(_ previous: locale_t?) {
        if let previous { uselocale(previous) }
    }
}
