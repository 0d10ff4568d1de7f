import Foundation

/// What one `publish` should release: a site folder as one version of one package.
public struct PublishRequest: Sendable, Equatable {
    /// The site folder; its content becomes the package tree.
    public var site: String
    public var id: String
    public var version: String
    /// Absolute http(s) URL prefixes ending in `/`.
    public var routes: [String]
    public var entry: String
    public var fallback: String?
    /// Write deltas from this many of the versions published before (0: none).
    public var deltaCount: Int
    public var rollout: Int?
    public var minShellVersion: String?
    public var format: ArchiveFormat
    /// The compressor's level for `format` (see `ArchiveFormat.levels`); nil takes its default.
    public var compressionLevel: Int? = nil
    /// tar.zst's layout; nil takes chunked for tar.zst (and solid, the only one, for the others).
    public var layout: ArchiveLayout? = nil
    /// When devices stop accepting the manifest (freeze protection), for this publish only.
    public var expires: Date?
    /// Devices stop accepting the manifest this many seconds after each publish: remembered by the
    /// repository and applied by every later publish that names no `expires`; 0 forgets it.
    public var expiresIn: TimeInterval?
    /// Release notes and the mandatory flag, written into the package entry (SPEC §12).
    public var notes: String?
    public var mandatory: Bool = false
    /// The publisher named `entry` (`--entry`): it must then be in the site. The default `index.html`
    /// may be absent (an assets-only package), which publish reports as a warning.
    public var requireEntry: Bool = false
    /// The manifest's `runtime` object (SPEC §11); nil keeps the manifest's own.
    public var runtime: RuntimeConfiguration? = nil

    public init(
        site: String, id: String, version: String, routes: [String], entry: String = "index.html",
        fallback: String? = nil, deltaCount: Int = 3, rollout: Int? = nil, minShellVersion: String? = nil,
        format: ArchiveFormat = .tarZstd, expires: Date? = nil
    ) {
        self.expires = expires
        self.site = site
        self.id = id
        self.version = version
        self.routes = routes
        self.entry = entry
        self.fallback = fallback
        self.deltaCount = deltaCount
        self.rollout = rollout
        self.minShellVersion = minShellVersion
        self.format = format
    }

    /// The layout this request writes.
    public var effectiveLayout: ArchiveLayout { format == .tarZstd ? (layout ?? .chunked) : .solid }

    /// Checks the values themselves, before any file is read.
    func validate() throws {
        guard PackageEntry.isValidID(id) else {
            throw OfflinePkgError.invalidArgument("package id \"\(id)\" must match [a-z0-9][a-z0-9._-]{0,63}")
        }
        guard PackageEntry.isValidVersion(version) else {
            throw OfflinePkgError.invalidArgument("version \"\(version)\" must match [A-Za-z0-9._+-]{1,64}")
        }
        guard !routes.isEmpty else { throw OfflinePkgError.invalidArgument("a package needs at least one route") }
        if let level = compressionLevel, !format.levels.contains(level) {
            throw OfflinePkgError.invalidArgument(
                "compression level \(level) is out of range for \(format.rawValue) (\(format.levels.lowerBound)-\(format.levels.upperBound))")
        }
        if layout == .chunked && format != .tarZstd {
            throw OfflinePkgError.invalidArgument("--layout chunked needs --format tar.zst; \(format.rawValue) is always solid")
        }
        // The same rule set a device applies to the manifest (SPEC §2): a route is written as a browser sends it.
        for route in routes {
            if let problem = RouteSyntax.problem(with: route) { throw OfflinePkgError.invalidArgument("route \(problem)") }
        }
        var seen = Set<String>()
        for route in routes where !seen.insert(RouteKey.normalized(route)!).inserted {
            throw OfflinePkgError.invalidArgument("route \"\(route)\" is given twice")
        }
        for (name, path) in [("entry", entry), ("fallback", fallback)] {
            if let path, let reason = ArchivePath.validate(path) {
                throw OfflinePkgError.invalidArgument(
                    "\(name) \"\(path)\" is not a relative file path inside the site (\(reason))")
            }
        }
        guard deltaCount >= 0 else { throw OfflinePkgError.invalidArgument("the number of deltas cannot be negative") }
        if let rollout, !(0...100).contains(rollout) {
            throw OfflinePkgError.invalidArgument("rollout must be between 0 and 100, got \(rollout)")
        }
        if let notes, notes.utf8.count > ReleaseInfo.maximumNotesBytes {
            throw OfflinePkgError.invalidArgument(
                "release notes are \(notes.utf8.count) bytes; at most \(ReleaseInfo.maximumNotesBytes) fit a manifest")
        }
        if let expiresIn, expiresIn < 0 || !expiresIn.isFinite {
            throw OfflinePkgError.invalidArgument("the expiry duration must be positive")
        }
        if let minShellVersion, ShellVersion(minShellVersion) == nil {
            throw OfflinePkgError.invalidArgument("minimum shell version \"\(minShellVersion)\" is not a dotted numeric version")
        }
    }
}

/// What a `publish` wrote.
public struct PublishReport: Sendable, Codable, Equatable {
    public struct WrittenFile: Sendable, Codable, Equatable {
        /// Relative to the manifest, as the manifest lists it.
        public var url: String
        public var sha256: String
        public var size: Int64
    }

    public struct WrittenDelta: Sendable, Codable, Equatable {
        public var from: String
        public var file: WrittenFile
        /// Files the delta carries (new or changed) and files it deletes.
        public var changed: Int
        public var deleted: Int
    }

    public struct SkippedDelta: Sendable, Codable, Equatable {
        public var from: String
        public var reason: String
    }

    public var id: String
    public var version: String
    public var sequence: Int
    public var archive: WrittenFile
    /// The chunked archive's file index, `files/<sha256>.json.zst` (nil for a solid archive).
    public var fileIndex: WrittenFile? = nil
    public var tree: String
    public var files: Int
    public var deltas: [WrittenDelta]
    public var skippedDeltas: [SkippedDelta]
    /// The same version with the same content was already published (e.g. to change `rollout`).
    public var republished: Bool
    public var signed: Bool
    /// What publish did but would rather not have (an assets-only package without its entry file).
    public var warnings: [String] = []
    /// The `promote` source repository, when this release was copied rather than packed.
    public var promotedFrom: String? = nil
}

/// What `publish` reports while it runs, for a progress display (the library never prints).
public enum PublishEvent: Sendable {
    /// The site was read: this many files and bytes go into the archive.
    case scanned(files: Int, bytes: Int64)
    /// Bytes of site files packed into the full archive so far.
    case packing(done: Int64, total: Int64)
    /// A delta from `from` is being written.
    case writingDelta(from: String)
    /// Archives are in place; the manifest and its signature go last.
    case writingManifest(sequence: Int)
}
