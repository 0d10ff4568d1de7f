import OfflinePkg
import FoundationEssentials

extension Publisher {
    /// Copies version `version` of package `id` from the repository `source` into this one and publishes
    /// it here (`promote`, docs/publishing.md: staging to production): its archive, the deltas into it, any other
    /// file its entry names, the file-index deltas from the trees published here, and its tree listing; then the manifest, with the entry as `source`
    /// published it (routes, notes, rollout...). The same stages as `publish`: everything under `.tmp/`
    /// first, the manifest and its signature last.
    package func promote(
        id: String, version: String, from source: URL, signingKeys: [SigningKey] = [], unsign: Bool = false,
        waiting: (() -> Void)? = nil
    ) throws -> PublishReport {
        guard ManifestRules.isValidID(id) else {
            throw OfflinePkgError.invalidArgument("package id \"\(id)\" must match \(ManifestRules.idPattern)")
        }
        guard ManifestRules.isValidVersion(version) else {
            throw OfflinePkgError.invalidArgument("version \"\(version)\" must match \(ManifestRules.versionPattern)")
        }
        let from = RepositoryLayout(root: source.path)
        guard (try? FileSystem.realPath(from.root)) != (try? FileSystem.realPath(layout.root)) else {
            throw OfflinePkgError.invalidArgument("promote needs two repositories; --from and --to are both \(layout.root)")
        }
        let entry = try Self.publishedEntry(id: id, version: version, in: from)
        let indexPath = from.treeIndex(id: id, version: version)
        guard FileSystem.exists(indexPath) else {
            throw OfflinePkgError.publishRefused(reason: "\(id) \(version) has no tree listing \(indexPath) in \(from.root)")
        }
        let index = try FileSystem.read(indexPath, limit: 256 << 20)
        let parsed = try Manifest(
            parsing: JSONTree.encode(["format": 1, "sequence": 1, "packages": [entry]] as [String: Any], pretty: false),
            source: "\(from.root) history of \(id) \(version)"
        ).packages[0]
        guard TreeHash.compute(try TreeIndexFile.decode(index, path: indexPath)) == parsed.tree else {
            throw OfflinePkgError.publishRefused(
                reason: "the tree listing \(indexPath) does not match \(id) \(version)'s tree hash")
        }

        let (lock, document) = try open(waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        try RepositorySigning(layout).check(signs: !signingKeys.isEmpty, unsign: unsign, repository: layout.root)
        try document.checkRoutes(parsed.routes, for: id)
        // The keys documents the target lacks come with the release (docs/protocol.md#keys-documents), and
        // the signers are checked against the newest of them before anything is copied.
        let keys = try keysToCarry(from: from)
        let signer = try ManifestSigner(keys: signingKeys, document: keys.latest, now: clock.now())
        let existing = layout.treeIndex(id: id, version: version)
        let republished = FileSystem.exists(existing)
        if republished, try FileSystem.read(existing, limit: 256 << 20) != index {
            throw OfflinePkgError.publishRefused(
                reason: "\(id) \(version) was already published in \(layout.root) with other content; promote another version")
        }
        // Every file the entry names, relative to the manifest: copied and checked against the entry.
        var written = [PublishReport.WrittenFile]()
        for (number, file) in Self.files(of: entry).enumerated() {
            guard let url = file["url"] as? String, Self.isRelative(url) else {
                throw OfflinePkgError.publishRefused(
                    reason: "\(id) \(version) names a file outside its repository: \(file["url"] ?? "?")")
            }
            let scratch = layout.temporary("promote-\(number)")
            guard FileSystem.exists(from.path(ofURL: url)) else {
                throw OfflinePkgError.publishRefused(reason: "\(id) \(version): \(from.path(ofURL: url)) is missing")
            }
            do {
                try FileManager.default.copyItem(atPath: from.path(ofURL: url), toPath: scratch)
            } catch {
                throw OfflinePkgError.publishRefused(reason: "cannot copy \(from.path(ofURL: url)) to \(scratch): \(error)")
            }
            let described = try describe(scratch, url: url)
            guard described.sha256 == file["sha256"] as? String, described.size == (file["size"] as? Int).map(Int64.init) else {
                throw OfflinePkgError.hashMismatch(
                    what: from.path(ofURL: url), expected: "\(file["sha256"] ?? "?") (\(file["size"] ?? "?") bytes)",
                    actual: "\(described.sha256) (\(described.size) bytes)")
            }
            written.append(described)
        }
        let indexDeltas = try copyFileIndexDeltas(into: parsed, id: id, version: version, from: from)
        FailPoint.publishBeforeRename.hit()
        for (number, file) in written.enumerated() { try moveIntoPlace(layout.temporary("promote-\(number)"), url: file.url) }
        for delta in indexDeltas {
            if delta.newest { try replaceIntoPlace(delta.scratch, url: delta.url) } else { try moveIntoPlace(delta.scratch, url: delta.url) }
        }
        try copyKeys(keys.copies, from: from)
        let release = try writeRelease(
            entry, id: id, version: version, index: index, document: document, expires: nil, expiresIn: nil, signer: signer,
            events: nil, promotedFrom: from.root)
        var report = PublishReport(
            id: id, version: version, sequence: release.sequence, archive: written[0], tree: parsed.tree,
            files: try TreeIndexFile.decode(index, path: indexPath).count,
            deltas: zip(parsed.deltas, written.dropFirst()).map { .init(from: $0.from, file: $1, changed: 0, deleted: 0) },
            skippedDeltas: [], republished: republished, signed: !release.signers.isEmpty, promotedFrom: from.root)
        (report.signers, report.keysVersion, report.keysCarried) = (release.signers, signer.keysVersion, keys.copies)
        return report
    }

    /// The keys versions of `source` that this repository lacks, after checking that the two share one
    /// chain: every version both hold has the same bytes (two chains would be two publishers' keys).
    /// `latest` is the newest version either holds.
    func keysToCarry(from source: RepositoryLayout) throws -> (latest: KeysDocument?, copies: [Int]) {
        let theirs = try RepositoryKeys.load(source).versions.map(\.document)
        let ours = try RepositoryKeys.load(layout).versions.map(\.document)
        for (mine, other) in zip(ours, theirs) where mine.bytes != other.bytes {
            throw OfflinePkgError.publishRefused(
                reason:
                    "keys/\(mine.version).json differs between \(source.root) and \(layout.root): the two repositories follow two chains of keys; promote between repositories of one publisher"
            )
        }
        guard theirs.count > ours.count else { return (ours.last, []) }
        return (theirs.last, Array(theirs[ours.count...].map(\.version)))
    }

    /// Copies keys versions `versions` from `source`, in order: each one's signatures, then the document.
    private func copyKeys(_ versions: [Int], from source: RepositoryLayout) throws {
        guard !versions.isEmpty else { return }
        try FileSystem.makeDirectories(layout.keys, mode: RepositoryLayout.folderMode)
        let names = FileSystem.contents(of: source.keys)
        for version in versions {
            let signatures = names.filter { $0.hasPrefix("\(version).json.") && $0.hasSuffix(".minisig") }.sorted()
            for name in signatures + ["\(version).json"] {
                let scratch = layout.temporary("keys-" + name)
                try FileSystem.write(try FileSystem.read(source.keys + "/" + name, limit: 64 << 10), to: scratch, mode: RepositoryLayout.fileMode)
                try FileSystem.rename(scratch, to: layout.keys + "/" + name)
            }
        }
        try FileSystem.syncDirectory(layout.keys)
    }

    /// The entry `version` of `id` had when `repository` published it: from its history, else from its
    /// manifest if that still offers the version.
    static func publishedEntry(id: String, version: String, in repository: RepositoryLayout) throws -> [String: Any] {
        if let record = PublishHistory.load(repository.publishHistory(id: id)).last(where: { $0.version == version && $0.entry != nil }),
            let text = record.entry,
            let object = try? JSONTree.parse(Array(text.utf8)) as? [String: Any]
        {
            return object
        }
        let document = try ManifestDocument.load(repository.manifest)
        if let object = document.packageObject(id), object["version"] as? String == version { return object }
        throw OfflinePkgError.unavailable("\(id) \(version) was never published in \(repository.root)")
    }

    /// The file-index deltas `source` wrote into `entry`'s file index from the trees this repository has
    /// published (the trees its devices can hold), each copied to a scratch file. Without them a device
    /// on this channel one version behind fetches the whole index. `source` keeps deltas from its last
    /// versions only; a tree it has none from costs that device the index, as after a publish.
    private func copyFileIndexDeltas(
        into entry: PackageEntry, id: String, version: String, from source: RepositoryLayout
    ) throws -> [(scratch: String, url: String, newest: Bool)] {
        guard let index = entry.archive.files else { return [] }
        var copied = [(scratch: String, url: String, newest: Bool)]()
        var trees = Set<String>()
        for published in try versionLog(id).filter({ $0 != version }).suffix(Self.fileIndexDeltaCount).reversed() {
            let path = layout.treeIndex(id: id, version: published)
            guard FileSystem.exists(path) else { continue }
            let tree = TreeHash.compute(try TreeIndexFile.decode(FileSystem.read(path, limit: FileIndex.maximumSize), path: path))
            let url = FileIndexDelta.url(nextTo: index.url, fromTree: tree, index: index.sha256)
            guard tree != entry.tree, trees.insert(tree).inserted, FileSystem.exists(source.path(ofURL: url)) else { continue }
            // Under its name, and as the newest delta from that tree on this channel.
            for (target, newest) in [(url, false), (FileIndexDelta.newestURL(nextTo: index.url, fromTree: tree), true)] {
                let scratch = layout.temporary("promote-index-delta-\(copied.count)")
                do {
                    try FileManager.default.copyItem(atPath: source.path(ofURL: url), toPath: scratch)
                } catch {
                    throw OfflinePkgError.publishRefused(reason: "cannot copy \(source.path(ofURL: url)) to \(scratch): \(error)")
                }
                copied.append((scratch, target, newest))
            }
        }
        return copied
    }

    /// The archive first, then each delta, then any other file object (`archive.files`) the entry names.
    private static func files(of entry: [String: Any]) -> [[String: Any]] {
        var files = [[String: Any]]()
        if let archive = entry["archive"] as? [String: Any] {
            files.append(archive)
            for case let (_, value as [String: Any]) in archive where value["url"] != nil && value["sha256"] != nil {
                files.append(value)
            }
        }
        if let deltas = entry["deltas"] as? [[String: Any]] {
            files.insert(contentsOf: deltas, at: 1)
        }
        return files
    }

    private static func isRelative(_ url: String) -> Bool {
        !url.contains("://") && !url.hasPrefix("/") && !url.split(separator: "/").contains("..") && !url.isEmpty
    }
}
