/// How a package's new tree arrives, cheapest first (docs/protocol.md#chunked-archives-and-file-indexes):
/// `files` (only the files the device lacks, by range requests against the archive's file index),
/// `delta` (from the active version), `archive` (the whole archive), or `cache` (the tree is on disk
/// already). The install stage chooses
/// it per package, a dry run says which it would take, and the root keeps it with the last sync's
/// changes; JSON carries the raw value.
public enum InstallRoute: String, Sendable, Codable, Equatable, CustomStringConvertible {
    case files
    case delta
    case archive
    case cache

    public var description: String { rawValue }
}
