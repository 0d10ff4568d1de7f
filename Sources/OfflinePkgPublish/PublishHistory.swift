import OfflinePkg
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// `trees/<id>/history.jsonl`: one line per publish or promote of a package, for `history` and for
/// `promote`, which copies a version's entry as it was published. Devices never read it.
package struct PublishHistory: Sendable {
    /// One publish of one version.
    package struct Record: Codable, Sendable, Equatable {
        package var version: String
        package var publishedAt: Date
        /// The manifest sequence the publish wrote.
        package var sequence: Int
        package var notes: String?
        package var mandatory: Bool
        package var rollout: Int?
        /// The repository this version was promoted from, if it was.
        package var promotedFrom: String?
        /// The package entry as the manifest held it (JSON): what `promote` writes into another manifest.
        package var entry: String?
        /// Set when this line is no publish but a `remove` of the package, or a `--disable`/`--enable`
        /// of `version`.
        package var action: PackageWithdrawal? = nil

        private enum CodingKeys: String, CodingKey {
            case version, publishedAt, sequence, notes, mandatory, rollout, promotedFrom, entry, action
        }
    }

    /// One package of a repository and its publishes, oldest first.
    package struct Package: Codable, Sendable, Equatable {
        package var id: String
        /// The version the repository's manifest offers now.
        package var current: String?
        /// The manifest offers `current` disabled (`remove --disable`).
        package var disabled: Bool? = nil
        package var releases: [Record]
    }

    package static func append(_ record: Record, to path: String) throws {
        var line = JSONCoding.encode(record, pretty: false)
        line.append(0x0a)
        let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_APPEND, mode: 0o644)
        try fd.closeAfter { try $0.writeAll(line, path: path) }
    }

    package static func load(_ path: String) -> [Record] {
        guard let bytes = try? FileSystem.read(path, limit: 64 << 20) else { return [] }
        return bytes.split(separator: 0x0a).compactMap { try? JSONCoding.decoder.decode(Record.self, from: Data($0)) }
    }
}

extension Publisher {
    /// Every package of the repository with its published versions (`history`, docs/publishing.md). Versions
    /// published before the history was kept appear with their tree listing's time and no notes.
    package func history() throws -> [PublishHistory.Package] {
        let document = try ManifestDocument.load(layout.manifest)
        var packages = [PublishHistory.Package]()
        let ids = FileSystem.contents(of: layout.trees).filter { FileSystem.isDirectory(layout.packageTrees($0)) }
        for id in ids.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            var records = PublishHistory.load(layout.publishHistory(id: id))
            let known = Set(records.map(\.version))
            for version in try versionLog(id) where !known.contains(version) {
                let index = layout.treeIndex(id: id, version: version)
                let time =
                    (try? FileManager.default.attributesOfItem(atPath: index)[.modificationDate] as? Date) ?? Date(timeIntervalSince1970: 0)
                records.append(.init(version: version, publishedAt: time, sequence: 0, mandatory: false))
            }
            records.sort { $0.publishedAt < $1.publishedAt }
            let offered = document.package(id)
            packages.append(
                .init(id: id, current: offered?.version, disabled: offered?.disabled == true ? true : nil, releases: records))
        }
        return packages
    }
}
