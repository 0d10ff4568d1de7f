import OfflinePkg
import FoundationEssentials

/// What one `publish` should release: a site folder as one version of one package.
package struct PublishRequest: Sendable, Equatable {
    /// The site folder; its content becomes the package tree.
    package var site: String
    package var id: String
    package var version: String
    /// Absolute http(s) URL prefixes ending in `/`.
    package var routes: [String]
    package var entry: String
    package var fallback: String?
    /// Write deltas from this many of the versions published before (0: none).
    package var deltaCount: Int
    package var rollout: Int?
    package var minShellVersion: String?
    /// The newest shell the release targets, compared on the components it has (`3.2`: every 3.2.x).
    package var maxShellVersion: String? = nil
    /// Publish a version lower than the newest published for the package (`--allow-downgrade`).
    package var allowDowngrade = false
    /// The unpack limits the release is checked against, as devices apply them (`checkAsDevice`):
    /// their defaults unless a fleet's devices are set lower.
    package var deviceLimits = UnpackLimits()
    package var format: ArchiveFormat
    /// The compressor's level for `format` (see `ArchiveFormat.levels`); nil takes its default.
    package var compressionLevel: Int? = nil
    /// tar.zst's layout; nil takes chunked for tar.zst (and solid, the only one, for the others).
    package var layout: ArchiveLayout? = nil
    /// When devices stop accepting the manifest (freeze protection), for this publish only.
    package var expires: Date?
    /// Devices stop accepting the manifest this many seconds after each publish: remembered by the
    /// repository and applied by every later publish that names no `expires`; 0 forgets it.
    package var expiresIn: TimeInterval?
    /// Release notes and the mandatory flag, written into the package entry (docs/protocol.md#package-entries).
    package var notes: String?
    package var mandatory: Bool = false
    /// The publisher named `entry` (`--entry`): it must then be in the site. The default `index.html`
    /// may be absent (an assets-only package), which publish reports as a warning.
    package var requireEntry: Bool = false
    /// The manifest's `runtime` object (docs/protocol.md#the-runtime-object); nil keeps the manifest's own.
    package var runtime: RuntimeConfiguration? = nil
    /// The manifest's `reports` URL (docs/protocol.md#install-reports): set, removed, or (nil) kept as the manifest has it.
    package var reports: ReportsChange? = nil

    package init(
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
    package var effectiveLayout: ArchiveLayout { format == .tarZstd ? (layout ?? .chunked) : .solid }

    /// Checks the values themselves, before any file is read.
    func validate() throws {
        guard ManifestRules.isValidID(id) else {
            throw OfflinePkgError.invalidArgument("package id \"\(id)\" must match \(ManifestRules.idPattern)")
        }
        guard ManifestRules.isValidVersion(version) else {
            throw OfflinePkgError.invalidArgument("version \"\(version)\" must match \(ManifestRules.versionPattern)")
        }
        guard !routes.isEmpty else { throw OfflinePkgError.invalidArgument("a package needs at least one route") }
        if let level = compressionLevel, !format.levels.contains(level) {
            throw OfflinePkgError.invalidArgument(
                "compression level \(level) is out of range for \(format.rawValue) (\(format.levels.lowerBound)-\(format.levels.upperBound))"
            )
        }
        if layout == .chunked && format != .tarZstd {
            throw OfflinePkgError.invalidArgument("--layout chunked needs --format tar.zst; \(format.rawValue) is always solid")
        }
        // The same rule set a device applies to the manifest (docs/protocol.md#package-entries): a route is written as a browser sends it.
        for route in routes {
            if let problem = ManifestRules.routeProblem(route) { throw OfflinePkgError.invalidArgument("route \(problem)") }
        }
        var seen = Set<String>()
        for route in routes where !seen.insert(RouteKey.normalized(route)!).inserted {
            throw OfflinePkgError.invalidArgument("route \"\(route)\" is given twice")
        }
        for (name, path) in [("entry", entry), ("fallback", fallback)] {
            if let path, let reason = ManifestRules.filePathProblem(path) {
                throw OfflinePkgError.invalidArgument(
                    "\(name) \"\(path)\" is not a relative file path inside the site (\(reason))")
            }
        }
        guard deltaCount >= 0 else { throw OfflinePkgError.invalidArgument("the number of deltas cannot be negative") }
        if let rollout, let problem = ManifestRules.rolloutProblem(rollout) {
            throw OfflinePkgError.invalidArgument("rollout \(problem)")
        }
        if let notes, notes.utf8.count > ReleaseInfo.maximumNotesBytes {
            throw OfflinePkgError.invalidArgument(
                "release notes are \(notes.utf8.count) bytes; at most \(ReleaseInfo.maximumNotesBytes) fit a manifest")
        }
        if let expiresIn, expiresIn < 0 || !expiresIn.isFinite {
            throw OfflinePkgError.invalidArgument("the expiry duration must be positive")
        }
        if case .set(let url) = reports, let problem = ManifestRules.reportsURLProblem(url) {
            throw OfflinePkgError.invalidArgument("reports URL \"\(url)\" \(problem)")
        }
        for (name, bound) in [("minimum", minShellVersion), ("maximum", maxShellVersion)] {
            if let bound, let problem = ManifestRules.shellVersionProblem(bound) {
                throw OfflinePkgError.invalidArgument("\(name) shell version \"\(bound)\" \(problem)")
            }
        }
        if let low = minShellVersion.flatMap(ShellVersion.init), let high = maxShellVersion.flatMap(ShellVersion.init),
            !low.isWithin(high)
        {
            throw OfflinePkgError.invalidArgument(
                "minimum shell version \(low) is above the maximum \(high): no shell could take the release")
        }
    }
}

/// What a publish does to the manifest's `reports` object (docs/protocol.md#install-reports).
package enum ReportsChange: Sendable, Equatable {
    /// Devices send their install reports to this URL, from this publish on.
    case set(String)
    /// Devices send none from this publish on (`--reports none`).
    case remove
}

/// What a `publish` wrote.
package struct PublishReport: Sendable, Codable, Equatable {
    package struct WrittenFile: Sendable, Codable, Equatable {
        /// Relative to the manifest, as the manifest lists it.
        package var url: String
        package var sha256: String
        package var size: Int64
    }

    package struct WrittenDelta: Sendable, Codable, Equatable {
        package var from: String
        package var file: WrittenFile
        /// Files the delta carries (new or changed) and files it deletes.
        package var changed: Int
        package var deleted: Int
    }

    package struct SkippedDelta: Sendable, Codable, Equatable {
        package var from: String
        package var reason: String
    }

    package var id: String
    package var version: String
    package var sequence: Int
    package var archive: WrittenFile
    /// The chunked archive's file index, `files/<sha256>.json.zst` (nil for a solid archive).
    package var fileIndex: WrittenFile? = nil
    package var tree: String
    package var files: Int
    package var deltas: [WrittenDelta]
    package var skippedDeltas: [SkippedDelta]
    /// The same version with the same content was already published (e.g. to change `rollout`).
    package var republished: Bool
    package var signed: Bool
    /// The key ids that signed the manifest, in `--sign-key` order.
    package var signers: [String] = []
    /// The keys version the manifest names, when the repository has keys documents.
    package var keysVersion: Int? = nil
    /// What publish did but would rather not have (an assets-only package without its entry file).
    package var warnings: [String] = []
    /// The `promote` source repository, when this release was copied rather than packed.
    package var promotedFrom: String? = nil
    /// `publish --check`: the release was built and checked as devices would, and nothing published;
    /// `sequence` is the one a publish would have written.
    package var checkedOnly: Bool = false
    /// Keys versions `promote` copied from the source repository, which the target lacked.
    package var keysCarried: [Int]? = nil
}

/// What `publish` reports while it runs, for a progress display (the library never prints).
package enum PublishEvent: Sendable {
    /// The site was read: this many files and bytes go into the archive.
    case scanned(files: Int, bytes: Int64)
    /// Bytes of site files packed into the full archive so far.
    case packing(done: Int64, total: Int64)
    /// A delta from `from` is being written.
    case writingDelta(from: String)
    /// Archives are in place; the manifest and its signature go last.
    case writingManifest(sequence: Int)
}
