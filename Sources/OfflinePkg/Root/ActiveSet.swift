import FoundationEssentials

/// One installed package as the active set records it: everything a lookup needs, without the manifest.
public struct InstalledPackage: Codable, Sendable, Equatable {
    public var id: String
    public var version: String
    public var tree: String
    public var routes: [String]
    public var entry: String
    public var fallback: String?
    /// The archive it was installed from, as its manifest wrote it: what `verify --repair` fetches again
    /// once the manifest no longer offers this version (after a rollback). Nil in sets recorded before
    /// offlinepkg kept it.
    public var archive: RemoteFile?
    /// The release's notes and mandatory flag as its manifest gave them (nil: none, or recorded before).
    public var notes: String?
    public var mandatory: Bool?

    package init(_ entry: PackageEntry) {
        notes = entry.notes
        mandatory = entry.mandatory ? true : nil
        id = entry.id
        version = entry.version
        tree = entry.tree
        routes = entry.routes
        self.entry = entry.entry
        fallback = entry.fallback
        archive = entry.archive
    }
}

/// The set of package versions being served. Switching it is the one atomic step of a release.
public struct ActiveSet: Codable, Sendable, Equatable {
    /// Raised by one at every switch, rollbacks included; readers compare it to notice a switch.
    public var generation: Int
    /// The manifest sequence this set came from (0 for none).
    public var sequence: Int
    public var activatedAt: Date
    public var packages: [InstalledPackage]

    public init(generation: Int, sequence: Int, activatedAt: Date, packages: [InstalledPackage]) {
        self.generation = generation
        self.sequence = sequence
        self.activatedAt = activatedAt
        self.packages = packages
    }

    package static let empty = ActiveSet(generation: 0, sequence: 0, activatedAt: Date(timeIntervalSince1970: 0), packages: [])

    private enum CodingKeys: String, CodingKey { case generation, sequence, activatedAt, packages }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        generation = try container.decode(Int.self, forKey: .generation)
        sequence = try container.decode(Int.self, forKey: .sequence)
        activatedAt = try container.decodeIfPresent(Date.self, forKey: .activatedAt) ?? Date(timeIntervalSince1970: 0)
        packages = try container.decode([InstalledPackage].self, forKey: .packages)
    }

    /// `activatedAt` is null for the empty set of a root where nothing was ever activated (generation
    /// 0), rather than a date in 1970 that a dashboard would take for a real activation.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(generation, forKey: .generation)
        try container.encode(sequence, forKey: .sequence)
        if generation == 0 {
            try container.encodeNil(forKey: .activatedAt)
        } else {
            try container.encode(activatedAt, forKey: .activatedAt)
        }
        try container.encode(packages, forKey: .packages)
    }

    package func package(_ id: String) -> InstalledPackage? { packages.first { $0.id == id } }

    /// Same packages at the same versions and trees, whatever the generation (and wherever the
    /// archives now live).
    package func hasSameContent(as other: ActiveSet) -> Bool {
        func served(_ set: ActiveSet) -> [InstalledPackage] {
            set.packages.map { package in
                var package = package
                package.archive = nil
                // Release notes edited on a republish do not make another set to serve.
                package.notes = nil
                package.mandatory = nil
                return package
            }.sorted { $0.id < $1.id }
        }
        return served(self) == served(other)
    }
}

/// The record in `active.json`: the active set and the one before it, kept for `rollback` and GC.
package struct ActiveRecord: Codable, Sendable, Equatable {
    package var current: ActiveSet
    package var previous: ActiveSet?
    /// True when `current` was made by a rollback from `previous`: a second rollback would take back
    /// the release just left, so there is nothing to roll back to (nil for a switch by a sync).
    package var previousWasRolledBack: Bool? = nil

    package init(current: ActiveSet, previous: ActiveSet?, previousWasRolledBack: Bool? = nil) {
        self.current = current
        self.previous = previous
        self.previousWasRolledBack = previousWasRolledBack
    }

    package static let empty = ActiveRecord(current: .empty, previous: nil)

    package static func load(_ layout: CacheLayout) throws -> ActiveRecord {
        try JSONCoding.load(ActiveRecord.self, from: layout.activeSet) ?? .empty
    }

    /// Writes the record with write, fsync, rename, fsync-folder: a crash leaves the old or the new one.
    package func save(_ layout: CacheLayout) throws {
        try FileSystem.writeAtomically(JSONCoding.encode(self), to: layout.activeSet)
    }
}
