import FoundationEssentials

/// One activation as `status` lists it: which set, when, and the package versions it served. Routes,
/// trees and archives stay in `active.json`; history only has to say what was live when.
public struct HistoryEntry: Codable, Sendable, Equatable {
    public struct Package: Codable, Sendable, Equatable {
        public var id: String
        public var version: String
    }

    public var generation: Int
    public var sequence: Int
    public var activatedAt: Date
    public var packages: [Package]

    package init(_ set: ActiveSet) {
        generation = set.generation
        sequence = set.sequence
        activatedAt = set.activatedAt
        packages = set.packages.map { Package(id: $0.id, version: $0.version) }
    }
}

/// `history.json`: the last activations, oldest first, bounded to a number of entries and rewritten
/// atomically at each activation. Not part of the crash-safe switch: a failed write costs a line of
/// history, never the active set. An unbounded append-only log grew by the whole set per activation
/// (309 KB at 1,000 packages) until `status` could no longer read it.
package enum History {
    /// How many activations are kept unless a caller says otherwise.
    package static let defaultLimit = 100
    /// Larger than `defaultLimit` entries of a 1,000-package set; past it the file is reported, not read.
    package static let maximumFileSize = 64 << 20

    /// What reading the history gave: the entries, and why some or all could not be read.
    package struct Loaded: Sendable {
        package var entries: [HistoryEntry] = []
        package var problem: String?
    }

    /// Appends `set` and keeps the last `limit` entries (at least one).
    package static func record(_ set: ActiveSet, limit: Int = defaultLimit, in layout: CacheLayout) {
        var entries = load(layout).entries
        entries.append(HistoryEntry(set))
        entries = Array(entries.suffix(max(1, limit)))
        try? FileSystem.writeAtomically(JSONCoding.encode(entries, pretty: false), to: layout.history)
        // The append-only log of earlier builds has been carried over by `load`.
        FileSystem.discardFile(layout.legacyHistory)
    }

    package static func load(_ layout: CacheLayout) -> Loaded {
        if FileSystem.exists(layout.history) {
            do {
                let bytes = try FileSystem.read(layout.history, limit: maximumFileSize)
                return Loaded(entries: try JSONCoding.decoder.decode([HistoryEntry].self, from: Data(bytes)))
            } catch {
                return Loaded(problem: "\(layout.history) is unreadable (\(error)); it is started again at the next activation")
            }
        }
        return loadLegacy(layout)
    }

    /// `history.jsonl`, one whole active set per line, as builds before the bounded history wrote it.
    private static func loadLegacy(_ layout: CacheLayout) -> Loaded {
        guard FileSystem.exists(layout.legacyHistory) else { return Loaded() }
        guard let bytes = try? FileSystem.read(layout.legacyHistory, limit: maximumFileSize) else {
            return Loaded(problem: "\(layout.legacyHistory) is larger than \(maximumFileSize) bytes; its entries are left out")
        }
        var loaded = Loaded()
        var unreadable = 0
        for line in bytes.split(separator: 0x0a) {
            if let set = try? JSONCoding.decoder.decode(ActiveSet.self, from: Data(line)) {
                loaded.entries.append(HistoryEntry(set))
            } else {
                unreadable += 1
            }
        }
        if unreadable > 0 { loaded.problem = "\(unreadable) line(s) of \(layout.legacyHistory) are unreadable and left out" }
        loaded.entries = Array(loaded.entries.suffix(defaultLimit))
        return loaded
    }
}
