import OfflinePkg
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// Turns a site folder into a release in a repository (`publish`, docs/publishing.md), as named stages:
/// check the request → scan the site → write the full archive (hashing each file as it goes in) →
/// refuse a reused version → write deltas from the last versions → update, sign and write the manifest.
/// Everything before the manifest write only adds files; the manifest (and its signature) go last, so a
/// failed publish leaves a repository whose manifest still describes complete, consistent archives.
///
/// One publish at a time per repository: each holds an exclusive `flock` on `repo/.publish.lock` from
/// reading the manifest to writing it, so two publishes started together (two packages released by
/// two CI steps) run one after the other and neither loses the other's package.
package struct Publisher: Sendable {
    package let layout: RepositoryLayout
    /// The time a publish is dated with and an expiry is counted from.
    package let clock: WallClock

    /// A repository folder; created if missing.
    package init(repository: URL, clock: WallClock = .system) {
        layout = RepositoryLayout(root: repository.path)
        self.clock = clock
    }

    /// Publishes `request`, signed by `signingKeys` (a threshold of the newest keys version's manifest
    /// keys when the repository has keys documents). Without any, a signed repository is refused unless
    /// `unsign` (then its signature is removed: it would no longer match). When another publish holds
    /// the repository, `waiting` is called once and the publish waits for it to finish.
    ///
    /// Refused before anything takes a published name (`publishRefused`): a site without a file, a
    /// release devices would refuse (`checkAsDevice`), a version lower than the newest published for
    /// the package unless `request.allowDowngrade`. With `checkOnly` (`publish --check`) the release is
    /// built and checked all the same, and nothing is published.
    package func publish(
        _ request: PublishRequest, signingKeys: [SigningKey] = [], unsign: Bool = false, checkOnly: Bool = false,
        waiting: (() -> Void)? = nil, events: (@Sendable (PublishEvent) -> Void)? = nil
    ) throws -> PublishReport {
        try request.validate()
        let site = try SiteScan(site: request.site)
        guard !site.files.isEmpty else {
            throw OfflinePkgError.publishRefused(
                reason:
                    "the site \(site.root) holds no file: devices refuse an empty archive, and with it every other package's update in the same release"
            )
        }
        let siteFiles = Set(site.files)
        var warnings = [String]()
        for (name, path) in [("entry", request.entry), ("fallback", request.fallback)] {
            guard let path, !siteFiles.contains(PackagePath(path)) else { continue }
            // docs/protocol.md#package-entries: a package may have no entry file (a JS library); one the publisher named must exist.
            if name == "entry" && !request.requireEntry {
                warnings.append(
                    "entry file \(path) is not in the site \(site.root): published as an assets-only package (a path ending in / finds nothing)"
                )
                continue
            }
            throw OfflinePkgError.publishRefused(reason: "\(name) file \(path) is not in the site \(site.root)")
        }
        let (lock, document) = try open(waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        try RepositorySigning(layout).check(signs: !signingKeys.isEmpty, unsign: unsign, repository: layout.root)
        try document.checkRoutes(request.routes, for: request.id)
        let signer = try ManifestSigner(keys: signingKeys, repository: layout, now: clock.now())
        try checkNotDowngrade(request, document: document)

        // Everything is written under .tmp/ first; nothing takes a published name before it is all there.
        var pending = [(scratch: String, url: String)]()
        let scratch = layout.temporary("\(request.id)-\(request.version)")
        let totalBytes = site.entries.reduce(Int64(0)) { $0 + $1.size }
        events?(.scanned(files: site.files.count, bytes: totalBytes))
        let (files, ranges, archiveHash) = try writeArchive(
            site, to: scratch, format: request.format, layout: request.effectiveLayout, level: request.compressionLevel
        ) { done in
            events?(.packing(done: done, total: totalBytes))
        }
        let tree = TreeHash.compute(files)
        let republished = try checkVersionIsNew(request, tree: tree, document: document)
        let archiveURL = layout.archiveURL(id: request.id, version: request.version, format: request.format)
        pending.append((scratch, archiveURL))
        let archive = try describe(scratch, url: archiveURL, sha256: archiveHash)
        var fileIndex: PublishReport.WrittenFile?
        var newestIndexDeltas = [(String, String)]()
        var indexToCheck: (path: String, reference: FileIndexReference)?
        if let ranges {
            let (written, path, entries) = try writeFileIndex(files: files, ranges: ranges, name: "\(request.id)-\(request.version)")
            fileIndex = written
            indexToCheck = (path, FileIndexReference(url: written.url, sha256: written.sha256, size: written.size))
            pending.append((path, written.url))
            let indexDeltas = try writeFileIndexDeltas(request, entries: entries, index: written)
            pending += indexDeltas.named
            newestIndexDeltas = indexDeltas.newest
        }
        try checkAsDevice(
            archive: scratch, url: archiveURL, tree: tree, archiveSize: archive.size, fileIndex: indexToCheck,
            limits: request.deviceLimits)

        // Deltas from the versions published before this one, newest first.
        let earlier = try versionLog(request.id).filter { $0 != request.version }
        var deltas = [PublishReport.WrittenDelta]()
        var skipped = [PublishReport.SkippedDelta]()
        for from in earlier.suffix(request.deltaCount).reversed() {
            events?(.writingDelta(from: from))
            switch try writeDelta(from: from, request: request, site: site, files: files, fullSize: archive.size) {
            case .written(let delta, let path):
                deltas.append(delta)
                pending.append((path, delta.file.url))
            case .skipped(let reason): skipped.append(.init(from: from, reason: reason))
            }
        }
        if !checkOnly {
            FailPoint.publishBeforeRename.hit()
            for (path, url) in pending { try moveIntoPlace(path, url: url) }
            for (path, url) in newestIndexDeltas { try replaceIntoPlace(path, url: url) }
        }

        var archiveFile = RemoteFile(url: archive.url, sha256: archive.sha256, size: archive.size)
        archiveFile.files = fileIndex.map { FileIndexReference(url: $0.url, sha256: $0.sha256, size: $0.size) }
        let entry = PackageEntry(
            id: request.id, version: request.version, routes: request.routes, entry: request.entry,
            fallback: request.fallback, archive: archiveFile,
            tree: tree,
            deltas: deltas.map {
                Delta(from: $0.from, file: RemoteFile(url: $0.file.url, sha256: $0.file.sha256, size: $0.file.size))
            },
            minShellVersion: request.minShellVersion, rollout: request.rollout,
            unpackedSize: files.values.reduce(0) { $0 + $1.size }, notes: request.notes, mandatory: request.mandatory,
            maxShellVersion: request.maxShellVersion)
        var report = PublishReport(
            id: request.id, version: request.version, sequence: document.sequence + 1, archive: archive, fileIndex: fileIndex,
            tree: tree, files: files.count, deltas: deltas, skippedDeltas: skipped, republished: republished,
            signed: !signer.keys.isEmpty, warnings: warnings)
        if checkOnly {
            // The manifest it would write, read as a device reads it; then the scratch files go.
            _ = try nextManifest(
                document, expires: request.expires, expiresIn: request.expiresIn, keysVersion: signer.keysVersion
            ) { document in
                document.replacePackage(object: ManifestDocument.json(entry), id: request.id)
                if let runtime = request.runtime { document.setRuntime(runtime) }
                if case .set(let url) = request.reports { document.setReports(url) }
            }
            try? FileSystem.removeTree(layout.scratch)
            report.checkedOnly = true
            (report.signers, report.keysVersion) = (signer.keys.map(\.keyID), signer.keysVersion)
            return report
        }
        let release = try writeRelease(
            ManifestDocument.json(entry), id: request.id, version: request.version, index: TreeIndexFile.encode(files),
            document: document, expires: request.expires, expiresIn: request.expiresIn, signer: signer, events: events,
            runtime: request.runtime, reports: request.reports)
        (report.sequence, report.signed) = (release.sequence, !release.signers.isEmpty)
        (report.signers, report.keysVersion) = (release.signers, signer.keysVersion)
        return report
    }

    /// The repository from here on: the lock first, so that nothing below reads a manifest that another
    /// publish is about to replace; then the scratch files an interrupted publish left are cleared.
    package func open(waiting: (() -> Void)?) throws -> (FileLock, ManifestDocument) {
        let lock = try lockRepository(waiting: waiting)
        let document = try ManifestDocument.load(layout.manifest)
        // Before any archive takes its name: a manifest at the last sequence cannot be published over.
        guard document.sequence < Int.max else {
            throw OfflinePkgError.publishRefused(
                reason:
                    "the manifest's sequence is \(document.sequence), the highest there is: restore the manifest of your last publish (one a leaked key signed may be in its place; docs/publishing.md)"
            )
        }
        return (lock, document)
    }

    /// The last stage of a publish or a promote, once the archives are in place: the tree listing (which
    /// marks the version as published), the version log, then the manifest with this package entry,
    /// sequence + 1 and the keys version it is signed under (`writeManifest`).
    package func writeRelease(
        _ entry: [String: Any], id: String, version: String, index: [UInt8], document: ManifestDocument,
        expires: Date?, expiresIn: TimeInterval?, signer: ManifestSigner,
        events: (@Sendable (PublishEvent) -> Void)?, promotedFrom: String? = nil, runtime: RuntimeConfiguration? = nil,
        reports: ReportsChange? = nil
    ) throws -> (sequence: Int, signers: [String]) {
        try FileSystem.makeDirectories(layout.packageTrees(id), mode: RepositoryLayout.folderMode)
        try FileSystem.writeAtomically(index, to: layout.treeIndex(id: id, version: version), mode: RepositoryLayout.fileMode)
        try recordVersion(version, id: id)
        let next = try nextManifest(document, expires: expires, expiresIn: expiresIn, keysVersion: signer.keysVersion) {
            document in
            document.replacePackage(object: entry, id: id)
            // The runtime object stays as the manifest has it unless this publish names one.
            if let runtime { document.setRuntime(runtime) }
            // So does the reports URL: set by `--reports URL`, removed by `--reports none`.
            switch reports {
            case .set(let url): document.setReports(url)
            case .remove: document.setReports(nil)
            case nil: break
            }
        }
        let record = PublishHistory.Record(
            version: version, publishedAt: clock.now(), sequence: next.sequence, notes: entry["notes"] as? String,
            mandatory: entry["mandatory"] as? Bool == true, rollout: entry["rollout"] as? Int, promotedFrom: promotedFrom,
            entry: String(decoding: JSONTree.encode(entry, pretty: false), as: UTF8.self))
        return try writeManifest(next, id: id, record: record, expiresIn: expiresIn, signer: signer, events: events)
    }

    /// The manifest `document` becomes once `edit` has changed its packages: sequence + 1 and this
    /// publish's expiry, checked as a device reads it (one this build's devices would refuse is never
    /// written). Writes nothing.
    package func nextManifest(
        _ document: ManifestDocument, expires: Date?, expiresIn: TimeInterval?, keysVersion: Int?,
        edit: (inout ManifestDocument) -> Void
    ) throws -> (bytes: [UInt8], sequence: Int) {
        var document = document
        let sequence = document.sequence + 1
        document.setSequence(sequence)
        edit(&document)
        document.setExpires(expiry(expires: expires, expiresIn: expiresIn))
        document.setKeysVersion(keysVersion)
        let bytes = try document.encoded()
        let written = try Manifest(parsing: bytes, source: layout.manifest)
        if let expires = written.expires, expires <= clock.now() {
            throw OfflinePkgError.publishRefused(
                reason: "the manifest expired at \(RFC3339.format(expires)); devices would refuse it: pass --expires (e.g. 30d)")
        }
        return (bytes, sequence)
    }

    /// Writes a manifest `nextManifest` made: the history line of `id`, the remembered expiry, the
    /// signatures — the manifest and `manifest.json.minisig` last of all.
    package func writeManifest(
        _ next: (bytes: [UInt8], sequence: Int), id: String, record: PublishHistory.Record, expiresIn: TimeInterval?,
        signer: ManifestSigner, events: (@Sendable (PublishEvent) -> Void)?
    ) throws -> (sequence: Int, signers: [String]) {
        events?(.writingManifest(sequence: next.sequence))
        try rememberExpiry(expiresIn)
        try FileSystem.makeDirectories(layout.packageTrees(id), mode: RepositoryLayout.folderMode)
        try PublishHistory.append(record, to: layout.publishHistory(id: id))
        let signatures = try signer.sign(next.bytes)
        if let first = signatures.first {
            // The copies named after the manifest's hash first: a device that finds `.minisig` out of step
            // with the manifest fetches these (docs/protocol.md#signatures). One per key when a threshold is
            // read from them (docs/protocol.md#keys-documents), or a device may trust another key than the first.
            let digest = SHA256.hash(next.bytes).hex
            try FileSystem.makeDirectories(layout.signatures, mode: RepositoryLayout.folderMode)
            for (keyID, file) in signatures where signer.document != nil || signatures.count > 1 {
                try FileSystem.writeAtomically(file, to: layout.keySignature(manifestSHA256: digest, keyID: keyID), mode: RepositoryLayout.fileMode)
            }
            try FileSystem.writeAtomically(first.bytes, to: layout.immutableSignature(manifestSHA256: digest), mode: RepositoryLayout.fileMode)
        }
        try FileSystem.writeAtomically(next.bytes, to: layout.manifest, mode: RepositoryLayout.fileMode)
        if let first = signatures.first {
            try FileSystem.writeAtomically(first.bytes, to: layout.signature, mode: RepositoryLayout.fileMode)
        } else {
            FileSystem.discardFile(layout.signature)
        }
        try? FileSystem.removeTree(layout.scratch)
        return (next.sequence, signatures.map(\.keyID))
    }

    /// `expires` for this publish only; else `expiresIn` (given now, or remembered from an earlier
    /// publish) from now; else none, so a date given once never outlives the publish that gave it.
    private func expiry(expires: Date?, expiresIn: TimeInterval?) -> Date? {
        if let expires { return expires }
        if let expiresIn { return expiresIn > 0 ? clock.now().addingTimeInterval(expiresIn) : nil }
        let remembered = (try? FileSystem.read(layout.expiresIn, limit: 64)).flatMap {
            TimeInterval(String(decoding: $0, as: UTF8.self).trimmingWhitespaceAndNewlines())
        }
        return remembered.flatMap { $0 > 0 ? clock.now().addingTimeInterval($0) : nil }
    }

    /// Keeps `--expires-in` for later publishes (0 forgets it).
    private func rememberExpiry(_ expiresIn: TimeInterval?) throws {
        guard let expiresIn else { return }
        if expiresIn == 0 {
            FileSystem.discardFile(layout.expiresIn)
        } else {
            try FileSystem.makeDirectories(layout.trees, mode: RepositoryLayout.folderMode)
            try FileSystem.writeAtomically(
                Array("\(Int(expiresIn))\n".utf8), to: layout.expiresIn, mode: RepositoryLayout.fileMode)
        }
    }
}
