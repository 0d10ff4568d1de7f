import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Turns a site folder into a release in a repository (SPEC §8 `publish`), as named stages:
/// check the request → scan the site → write the full archive (hashing each file as it goes in) →
/// refuse a reused version → write deltas from the last versions → update, sign and write the manifest.
/// Everything before the manifest write only adds files; the manifest (and its signature) go last, so a
/// failed publish leaves a repository whose manifest still describes complete, consistent archives.
///
/// One publish at a time per repository: each holds an exclusive `flock` on `repo/.publish.lock` from
/// reading the manifest to writing it, so two publishes started together (two packages released by
/// two CI steps) run one after the other and neither loses the other's package.
public struct Publisher: Sendable {
    package let layout: RepositoryLayout

    /// A repository folder; created if missing.
    public init(repository: URL) {
        layout = RepositoryLayout(root: repository.path)
    }

    /// Publishes `request`. `signer` turns the manifest bytes into a `manifest.json.minisig`; without
    /// one, a signature left by an earlier publish is removed (it no longer matches). When another
    /// publish holds the repository, `waiting` is called once and the publish waits for it to finish.
    public func publish(
        _ request: PublishRequest, signer: (([UInt8]) throws -> [UInt8])? = nil, waiting: (() -> Void)? = nil
    ) throws -> PublishReport {
        try request.validate()
        let site = try SiteScan(site: request.site)
        let siteFiles = Set(site.files)
        for (name, path) in [("entry", request.entry), ("fallback", request.fallback)] {
            guard let path else { continue }
            guard siteFiles.contains(path) else {
                throw OfflinePkgError.publishRefused(reason: "\(name) file \(path) is not in the site \(site.root)")
            }
        }
        // The repository from here on: the lock first, so that nothing below reads a manifest that
        // another publish is about to replace.
        try FileSystem.makeDirectories(layout.root)
        var lock = try FileLock(path: layout.lock, wait: false)
        if lock == nil {
            waiting?()
            lock = try FileLock(path: layout.lock, wait: true)
        }
        defer { withExtendedLifetime(lock) {} }
        var document = try ManifestDocument.load(layout.manifest)
        try document.checkRoutes(request.routes, for: request.id)

        try FileSystem.makeDirectories(layout.archives)
        try FileSystem.makeDirectories(layout.packageTrees(request.id))

        // Full archive, into a scratch file first: nothing is named after the version before it is checked.
        let scratch = layout.temporary("\(getpid())-\(request.id)-\(request.version)")
        defer { FileSystem.removeFile(scratch) }
        let files = try writeArchive(site, to: scratch, format: request.format, level: request.compressionLevel)
        let tree = TreeHash.compute(files)
        let republished = try checkVersionIsNew(request, tree: tree, document: document)

        let archiveURL = layout.archiveURL(id: request.id, version: request.version, format: request.format)
        try moveIntoPlace(scratch, url: archiveURL)
        let archive = try describe(archiveURL)

        // Deltas from the versions published before this one, newest first.
        let earlier = try versionLog(request.id).filter { $0 != request.version }
        var deltas = [PublishReport.WrittenDelta]()
        var skipped = [PublishReport.SkippedDelta]()
        for from in earlier.suffix(request.deltaCount).reversed() {
            switch try writeDelta(from: from, request: request, site: site, files: files, fullSize: archive.size) {
            case .written(let delta): deltas.append(delta)
            case .skipped(let reason): skipped.append(.init(from: from, reason: reason))
            }
        }
        // The listing marks the version as published: written only once everything else is, so a publish
        // that failed on the way can be rerun with corrected content under the same version.
        try FileSystem.writeAtomically(
            TreeIndexFile.encode(files), to: layout.treeIndex(id: request.id, version: request.version))
        try recordVersion(request.version, id: request.id)

        // The manifest: this package replaced or added, everything else as it was, sequence + 1.
        let entry = PackageEntry(
            id: request.id, version: request.version, routes: request.routes, entry: request.entry,
            fallback: request.fallback, archive: RemoteFile(url: archive.url, sha256: archive.sha256, size: archive.size),
            tree: tree,
            deltas: deltas.map {
                Delta(from: $0.from, file: RemoteFile(url: $0.file.url, sha256: $0.file.sha256, size: $0.file.size))
            },
            minShellVersion: request.minShellVersion, rollout: request.rollout,
            unpackedSize: files.values.reduce(0) { $0 + $1.size })
        let sequence = document.sequence + 1
        document.setSequence(sequence)
        document.replacePackage(entry)
        if let expires = request.expires { document.setExpires(expires) }
        if let runtime = request.runtime { document.setRuntime(runtime) }
        let bytes = try document.encoded()
        // The result must be a manifest this build's devices accept — expired, they would refuse it all.
        let written = try Manifest(parsing: bytes, source: layout.manifest)
        if let expires = written.expires, expires <= Date() {
            throw OfflinePkgError.publishRefused(
                reason: "the manifest expired at \(RFC3339.format(expires)); devices would refuse it: pass --expires (e.g. 30d)")
        }
        let signature = try signer?(bytes)
        try FileSystem.writeAtomically(bytes, to: layout.manifest)
        if let signature {
            try FileSystem.writeAtomically(signature, to: layout.signature)
        } else {
            FileSystem.removeFile(layout.signature)
        }
        return PublishReport(
            id: request.id, version: request.version, sequence: sequence, archive: archive, tree: tree,
            files: files.count, deltas: deltas, skippedDeltas: skipped, republished: republished, signed: signature != nil)
    }

    // MARK: Stages

    private func writeArchive(_ site: SiteScan, to path: String, format: ArchiveFormat, level: Int?) throws -> [String: TreeFile] {
        let writer = try ArchiveWriter(path: path, format: format, level: level)
        var files = [String: TreeFile]()
        for entry in site.entries {
            if entry.isDirectory {
                try writer.addDirectory(entry.path)
            } else {
                files[entry.path] = try writer.addFile(entry.path, contentsOf: site.root + "/" + entry.path)
            }
        }
        try writer.finish()
        return files
    }

    /// A version is published once. The same content again is allowed (to change routes or rollout, or
    /// to roll back by republishing an old version); other content under the same version is refused,
    /// since devices that have the version would never see the change.
    /// Returns whether this is such a republish.
    private func checkVersionIsNew(_ request: PublishRequest, tree: String, document: ManifestDocument) throws -> Bool {
        var previous: String?
        let index = layout.treeIndex(id: request.id, version: request.version)
        if FileSystem.exists(index) {
            previous = TreeHash.compute(try TreeIndexFile.decode(FileSystem.read(index, limit: 256 << 20), path: index))
        } else if let listed = document.package(request.id), listed.version == request.version {
            previous = listed.tree
        }
        guard let previous else { return false }
        guard previous == tree else {
            throw OfflinePkgError.publishRefused(
                reason:
                    "\(request.id) \(request.version) was already published with other content (tree \(previous), now \(tree)); publish it under a new version"
            )
        }
        return true
    }

    private enum DeltaOutcome {
        case written(PublishReport.WrittenDelta)
        case skipped(String)
    }

    private func writeDelta(
        from: String, request: PublishRequest, site: SiteScan, files: [String: TreeFile], fullSize: Int64
    ) throws -> DeltaOutcome {
        let index = layout.treeIndex(id: request.id, version: from)
        guard FileSystem.exists(index) else { return .skipped("no tree listing \(index)") }
        let old = try TreeIndexFile.decode(FileSystem.read(index, limit: 256 << 20), path: index)
        let changed = TreeHash.sortedPaths(files).filter { old[$0]?.sha256 != files[$0]!.sha256 }
        let deleted = TreeHash.sortedPaths(old).filter { files[$0] == nil }
        let control = DeltaControl(from: from, to: request.version, delete: deleted)

        let scratch = layout.temporary("\(getpid())-\(request.id)-\(from)-\(request.version).delta")
        defer { FileSystem.removeFile(scratch) }
        let writer = try ArchiveWriter(path: scratch, format: request.format, level: request.compressionLevel)
        try writer.addFile(ArchivePath.deltaControlName, bytes: control.encoded())
        for path in changed {
            let written = try writer.addFile(path, contentsOf: site.root + "/" + path)
            // The site changed under us between the two passes: the delta would not arrive at `tree`.
            guard written == files[path] else {
                throw OfflinePkgError.publishRefused(reason: "\(site.root)/\(path) changed while publishing")
            }
        }
        try writer.finish()
        guard let size = FileSystem.fileSize(scratch) else {
            throw OfflinePkgError.io(path: scratch, operation: "stat", Errno.noEntry)
        }
        guard size < fullSize else {
            return .skipped("the delta (\(size) bytes) is not smaller than the full archive (\(fullSize) bytes)")
        }
        let url = layout.deltaURL(id: request.id, from: from, to: request.version, format: request.format)
        try moveIntoPlace(scratch, url: url)
        return .written(.init(from: from, file: try describe(url), changed: changed.count, deleted: deleted.count))
    }

    /// Renames a finished scratch file to its URL's path. Archives are immutable once published (CDNs
    /// cache them for a year): an existing file may only be replaced by the very same bytes.
    private func moveIntoPlace(_ scratch: String, url: String) throws {
        let path = layout.path(ofURL: url)
        if FileSystem.exists(path), try FileHasher.sha256(ofFile: path) != FileHasher.sha256(ofFile: scratch) {
            throw OfflinePkgError.publishRefused(
                reason: "\(url) already exists with other content; published archives are never rewritten")
        }
        try FileSystem.makeDirectories(FileSystem.parentPath(path))
        try FileSystem.rename(scratch, to: path)
    }

    private func describe(_ url: String) throws -> PublishReport.WrittenFile {
        let path = layout.path(ofURL: url)
        guard let size = FileSystem.fileSize(path) else { throw OfflinePkgError.io(path: path, operation: "stat", Errno.noEntry) }
        return .init(url: url, sha256: try FileHasher.sha256(ofFile: path), size: size)
    }

    // MARK: Version log

    private func versionLog(_ id: String) throws -> [String] {
        let path = layout.versionLog(id: id)
        guard FileSystem.exists(path) else { return [] }
        return String(decoding: try FileSystem.read(path), as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// Moves `version` to the end of the log: the most recently published version is the newest, even
    /// when it is an old version published again.
    private func recordVersion(_ version: String, id: String) throws {
        let versions = try versionLog(id).filter { $0 != version } + [version]
        try FileSystem.writeAtomically(Array(versions.map { $0 + "\n" }.joined().utf8), to: layout.versionLog(id: id))
    }
}
