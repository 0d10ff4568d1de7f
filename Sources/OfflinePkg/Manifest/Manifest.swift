import Foundation

/// A parsed and validated `manifest.json` (format 1). One manifest is one release.
public struct Manifest: Sendable, Equatable {
    public var sequence: Int
    public var expires: Date?
    public var packages: [PackageEntry]
    /// How URLs outside packages are cached on the device (SPEC §11); nil when the manifest has none.
    public var runtime: RuntimeConfiguration? = nil

    /// The highest manifest format this build reads.
    public static let supportedFormat = 1
    /// A manifest larger than this is refused before it is parsed.
    public static let maximumSize = 16 << 20

    public init(sequence: Int, expires: Date? = nil, packages: [PackageEntry]) {
        self.sequence = sequence
        self.expires = expires
        self.packages = packages
    }
}

/// One package of a manifest: a versioned tree of files answering a set of URL prefixes.
public struct PackageEntry: Sendable, Equatable {
    public var id: String
    public var version: String
    public var routes: [String]
    public var entry: String
    public var fallback: String?
    public var archive: RemoteFile
    public var tree: String
    public var deltas: [Delta]
    public var minShellVersion: String?
    public var rollout: Int?
    /// Release notes the publisher wrote (`publish --notes`), for the shell to show.
    public var notes: String?
    /// The publisher asks shells to apply this release at once rather than at the next launch.
    public var mandatory: Bool
    /// Optional: the bytes of the unpacked tree's files, as `publish` writes it. Advisory (a device
    /// uses it only to check free space before a sync; the unpack limits still hold).
    public var unpackedSize: Int64?

    public init(
        id: String, version: String, routes: [String], entry: String = "index.html", fallback: String? = nil,
        archive: RemoteFile, tree: String, deltas: [Delta] = [], minShellVersion: String? = nil, rollout: Int? = nil,
        unpackedSize: Int64? = nil, notes: String? = nil, mandatory: Bool = false
    ) {
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
    /// A package archive's file index (SPEC §13, `archive.files`); nil for deltas and archives without one.
    package var files: FileIndexReference? = nil

    public init(url: String, sha256: String, size: Int64) {
        self.url = url
        self.sha256 = sha256
        self.size = size
    }
}

/// An archive that turns version `from` into the package's version (SPEC §5).
public struct Delta: Sendable, Equatable {
    public var from: String
    public var file: RemoteFile

    public init(from: String, file: RemoteFile) {
        self.from = from
        self.file = file
    }
}
