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
    /// When devices stop accepting the manifest (freeze protection); nil keeps the manifest's own.
    public var expires: Date?
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
    public var tree: String
    public var files: Int
    public var deltas: [WrittenDelta]
    public var skippedDeltas: [SkippedDelta]
    /// The same version with the same content was already published (e.g. to change `rollout`).
    public var republished: Bool
    public var signed: Bool
}
