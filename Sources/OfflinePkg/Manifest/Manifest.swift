import FoundationEssentials

/// A parsed and validated `manifest.json` (format 1). One manifest is one release.
package struct Manifest: Sendable, Equatable {
    package var sequence: Int
    package var expires: Date?
    package var packages: [PackageEntry]
    /// How URLs outside packages are cached on the device (docs/protocol.md#the-runtime-cache); nil when the manifest has none.
    package var runtime: RuntimeConfiguration? = nil
    /// Where devices send their install reports (docs/protocol.md#install-reports, `reports.url`); nil: they send none.
    package var reportsURL: String? = nil
    /// The keys document version whose manifest keys sign this manifest (`"keys"`,
    /// docs/protocol.md#keys-documents); nil for a manifest signed by a fixed key, or not at all.
    package var keysVersion: Int? = nil

    /// The highest manifest format this build reads.
    package static let supportedFormat = 1
    /// A manifest larger than this is refused before it is parsed.
    package static let maximumSize = 16 << 20

    package init(sequence: Int, expires: Date? = nil, packages: [PackageEntry]) {
        self.sequence = sequence
        self.expires = expires
        self.packages = packages
    }
}

/// One package of a manifest: a versioned tree of files answering a set of URL prefixes.
package struct PackageEntry: Sendable, Equatable {
    package var id: String
    package var version: String
    package var routes: [String]
    package var entry: String
    package var fallback: String?
    package var archive: RemoteFile
    package var tree: String
    package var deltas: [Delta]
    package var minShellVersion: String?
    /// The newest shell this release targets (expo's runtime version, CodePush's target binary range),
    /// compared on the components it has: `3.2` admits every `3.2.x` shell.
    package var maxShellVersion: String?
    package var rollout: Int?
    /// The publisher withdrew this release (`remove --disable`, CodePush's "disabled"): devices do not
    /// take it and keep what they have of the package.
    package var disabled: Bool
    /// Release notes the publisher wrote (`publish --notes`), for the shell to show.
    package var notes: String?
    /// The publisher asks shells to apply this release at once rather than at the next launch.
    package var mandatory: Bool
    /// Optional: the bytes of the unpacked tree's files, as `publish` writes it. Advisory (a device
    /// uses it only to check free space before a sync; the unpack limits still hold).
    package var unpackedSize: Int64?

    package init(
        id: String, version: String, routes: [String], entry: String = "index.html", fallback: String? = nil,
        archive: RemoteFile, tree: String, deltas: [Delta] = [], minShellVersion: String? = nil, rollout: Int? = nil,
        unpackedSize: Int64? = nil, notes: String? = nil, mandatory: Bool = false, maxShellVersion: String? = nil,
        disabled: Bool = false
    ) {
        self.maxShellVersion = maxShellVersion
        self.disabled = disabled
        self.notes = notes
        self.mandatory = mandatory
        self.id = id
        self.version = version
        self.routes = routes
        self.entry = entry
        self.fallback = fallback
        self.archive = archive
        self.tree = tree
        self.deltas = deltas
        self.minShellVersion = minShellVersion
        self.rollout = rollout
        self.unpackedSize = unpackedSize
    }
}

/// A file the manifest points to, with the hash and size it must have.
public struct RemoteFile: Codable, Sendable, Equatable {
    /// As written in the manifest: absolute, or relative to the manifest URL.
    public var url: String
    public var sha256: String
    public var size: Int64
    /// A package archive's file index (docs/protocol.md#chunked-archives-and-file-indexes, `archive.files`); nil for deltas and archives without one.
    package var files: FileIndexReference? = nil

    public init(url: String, sha256: String, size: Int64) {
        self.url = url
        self.sha256 = sha256
        self.size = size
    }
}

/// An archive that turns version `from` into the package's version (docs/protocol.md#deltas).
package struct Delta: Sendable, Equatable {
    package var from: String
    package var file: RemoteFile

    package init(from: String, file: RemoteFile) {
        self.from = from
        self.file = file
    }
}
