/// The archive formats `publish` writes. A device reads any of them (recognised by content, SPEC §3);
/// tar.zst is the default because zstd decompresses several times faster than gzip on phone-class CPUs
/// at a similar or better ratio, and unpacking sits on the path between download and activation.
public enum ArchiveFormat: String, CaseIterable, Sendable, Codable {
    case tarZstd = "tar.zst"
    case tarGzip = "tar.gz"
    case zip

    /// The file name extension, without the leading dot.
    public var fileExtension: String { rawValue }
}
