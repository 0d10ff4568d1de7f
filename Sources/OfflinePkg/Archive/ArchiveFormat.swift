/// The archive formats `publish` writes. A device reads any of them (recognised by content, docs/protocol.md#archives);
/// tar.zst is the default because zstd decompresses several times faster than gzip on phone-class CPUs
/// at a similar or better ratio, and unpacking sits on the path between download and activation.
package enum ArchiveFormat: String, CaseIterable, Sendable, Codable {
    case tarZstd = "tar.zst"
    case tarGzip = "tar.gz"
    case zip

    /// The compression levels `--compression-level` accepts for this format.
    package var levels: ClosedRange<Int> { self == .tarZstd ? 1...19 : 1...9 }

    /// The level used when none is given: zstd's own default (fast to write, as fast to decode as any
    /// level), and gzip's and zip's best, as before.
    package var defaultLevel: Int { self == .tarZstd ? 3 : 9 }

    /// The file name extension, without the leading dot.
    package var fileExtension: String { rawValue }
}

/// How a tar.zst is cut into zstd frames (docs/protocol.md#chunked-archives-and-file-indexes). `chunked`, the default: every tar member in its
/// own frames, with a file index beside the archive, so a device can fetch single files by range.
/// `solid`: one zstd stream over the whole tar (a few percent smaller; no file index). Other formats
/// are always solid.
package enum ArchiveLayout: String, CaseIterable, Sendable, Codable {
    case chunked
    case solid
}
