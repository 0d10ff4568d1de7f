import OfflinePkg
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The stages of a publish that write what devices fetch: the archive, its file index and index deltas,
/// deltas from earlier versions, and the moves of finished files into their published names.
extension Publisher {
    /// Writes the full archive; for the chunked layout also returns each file's byte range in it and
    /// the archive's sha256, hashed as it was written.
    func writeArchive(
        _ site: SiteScan, to path: String, format: ArchiveFormat, layout: ArchiveLayout, level: Int?,
        progress: (Int64) -> Void
    ) throws -> ([PackagePath: TreeFile], [(path: PackagePath, offset: Int64, length: Int64)]?, String?) {
        var files = [PackagePath: TreeFile]()
        var done: Int64 = 0
        func add(_ entry: SiteScan.Entry, directory: (String) throws -> Void, file: (String, String) throws -> TreeFile) throws {
            if entry.isDirectory {
                try directory(entry.path.string)
            } else {
                let written = try file(entry.path.string, site.root + "/" + entry.path.string)
                files[entry.path] = written
                if done == 0 { FailPoint.publishPacking.hit() }
                done += written.size
                progress(done)
            }
        }
        if layout == .chunked {
            let writer = try ChunkedArchiveWriter(path: path, level: level ?? format.defaultLevel)
            for entry in site.entries {
                try add(entry, directory: writer.addDirectory, file: writer.addFile(_:contentsOf:))
            }
            let ranges = try writer.finish()
            return (files, ranges, writer.sha256)
        }
        let writer = try ArchiveWriter(path: path, format: format, level: level)
        for entry in site.entries {
            try add(entry, directory: writer.addDirectory, file: writer.addFile(_:contentsOf:))
        }
        try writer.finish()
        return (files, nil, nil)
    }

    /// The file index of a chunked archive (docs/protocol.md#chunked-archives-and-file-indexes), zstd-compressed, in a scratch file; its URL is
    /// `files/<sha256 of the compressed bytes>.json.zst`.
    func writeFileIndex(
        files: [PackagePath: TreeFile], ranges: [(path: PackagePath, offset: Int64, length: Int64)], name: String
    ) throws -> (PublishReport.WrittenFile, path: String, entries: [FileIndex.Entry]) {
        let entries = ranges.sorted { $0.path < $1.path }.map { range in
            FileIndex.Entry(
                path: range.path, sha256: files[range.path]!.sha256, size: files[range.path]!.size, offset: range.offset,
                length: range.length)
        }
        // Small for the devices, quick for the publisher (see `ZstdFrames.fileIndex`).
        let compressed = try ZstdFrames.fileIndex(FileIndex(entries: entries).encode())
        let scratch = layout.temporary(name + ".files.json.zst")
        try FileSystem.write(compressed, to: scratch, mode: RepositoryLayout.fileMode)
        let sha256 = SHA256.hash(compressed).hex
        return (.init(url: layout.fileIndexURL(sha256: sha256), sha256: sha256, size: Int64(compressed.count)), scratch, entries)
    }

    /// Index deltas kept per release: from the trees of this many versions published before it.
    /// A delta is a few hundred bytes for a few changed files, so many versions cost the repository little,
    /// and a device that many versions behind pays for the files that changed, not for the whole index.
    package static let fileIndexDeltaCount = 32

    /// File-index deltas (`FileIndexDelta`) into `index` from the trees of the versions published before,
    /// newest first, each in a scratch file with its URL (`named`), and again under the name of the
    /// newest delta from its tree (`newest`, which replaces the one before); one whose tree equals the new
    /// one is not needed, and one as large as the index is not worth it.
    func writeFileIndexDeltas(
        _ request: PublishRequest, entries: [FileIndex.Entry], index: PublishReport.WrittenFile
    ) throws -> (named: [(String, String)], newest: [(String, String)]) {
        var written = [(String, String)]()
        var newest = [(String, String)]()
        var trees = Set<String>()
        for from in try versionLog(request.id).filter({ $0 != request.version }).suffix(Self.fileIndexDeltaCount).reversed() {
            let path = layout.treeIndex(id: request.id, version: from)
            guard FileSystem.exists(path) else { continue }
            let old = try TreeIndexFile.decode(FileSystem.read(path, limit: FileIndex.maximumSize), path: path)
            let tree = TreeHash.compute(old)
            guard trees.insert(tree).inserted else { continue }
            let delta = FileIndexDelta(from: tree, old: old, new: entries, index: index.sha256)
            if delta.files.isEmpty && delta.delete.isEmpty { continue }
            let compressed = try ZstdFrames.fileIndex(delta.encode())
            guard Int64(compressed.count) < index.size else { continue }
            let scratch = layout.temporary("\(request.id)-\(request.version)-from-\(tree.prefix(16)).json.zst")
            try FileSystem.write(compressed, to: scratch)
            written.append((scratch, layout.fileIndexDeltaURL(fromTree: tree, index: index.sha256)))
            let copy = layout.temporary("\(request.id)-\(request.version)-newest-\(tree.prefix(16)).json.zst")
            try FileSystem.write(compressed, to: copy)
            newest.append((copy, FileIndexDelta.newestURL(nextTo: index.url, fromTree: tree)))
        }
        return (written, newest)
    }

    /// A version is published once. The same content again is allowed (to change routes or rollout, or
    /// to roll back by republishing an old version); other content under the same version is refused,
    /// since devices that have the version would never see the change.
    /// Returns whether this is such a republish.
    func checkVersionIsNew(_ request: PublishRequest, tree: String, document: ManifestDocument) throws -> Bool {
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

    enum DeltaOutcome {
        /// Written to the scratch file `path`, not yet under its URL.
        case written(PublishReport.WrittenDelta, path: String)
        case skipped(String)
    }

    func writeDelta(
        from: String, request: PublishRequest, site: SiteScan, files: [PackagePath: TreeFile], fullSize: Int64
    ) throws -> DeltaOutcome {
        let index = layout.treeIndex(id: request.id, version: from)
        guard FileSystem.exists(index) else { return .skipped("no tree listing \(index)") }
        let old = try TreeIndexFile.decode(FileSystem.read(index, limit: 256 << 20), path: index)
        let changed = TreeHash.sortedPaths(files).filter { old[$0]?.sha256 != files[$0]!.sha256 }
        let deleted = TreeHash.sortedPaths(old).filter { files[$0] == nil }
        let control = DeltaControl(from: from, to: request.version, delete: deleted.map(\.string))

        let scratch = layout.temporary("\(request.id)-\(from)-\(request.version).delta")
        let writer = try ArchiveWriter(path: scratch, format: request.format, level: request.compressionLevel)
        try writer.addFile(ArchivePath.deltaControlName, bytes: control.encoded())
        for path in changed {
            let written = try writer.addFile(path.string, contentsOf: site.root + "/" + path.string)
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
        return .written(
            .init(from: from, file: try describe(scratch, url: url), changed: changed.count, deleted: deleted.count),
            path: scratch)
    }

    /// Renames a finished scratch file to its URL's path. Archives are immutable once published (CDNs
    /// cache them for a year): an existing file may only be replaced by the very same bytes.
    package func moveIntoPlace(_ scratch: String, url: String) throws {
        let path = layout.path(ofURL: url)
        if FileSystem.exists(path) {
            guard try FileHasher.sha256(ofFile: path) == FileHasher.sha256(ofFile: scratch) else {
                throw OfflinePkgError.publishRefused(
                    reason: "\(url) already exists with other content; published archives are never rewritten")
            }
            // The very same bytes are there: leave the published file (and its mtime, for a CDN sync) alone.
            FileSystem.discardFile(scratch)
            return
        }
        try FileSystem.makeDirectories(FileSystem.parentPath(path), mode: RepositoryLayout.folderMode)
        try FileSystem.rename(scratch, to: path)
    }

    /// Renames a finished scratch file to its URL's path, over what is there: for the one kind of file a
    /// publish rewrites, the newest file-index delta from a tree (`FileIndexDelta.newestURL`).
    package func replaceIntoPlace(_ scratch: String, url: String) throws {
        let path = layout.path(ofURL: url)
        try FileSystem.makeDirectories(FileSystem.parentPath(path))
        try FileSystem.rename(scratch, to: path)
    }

    /// The file at `path` as the manifest will list it under `url`; `sha256` when it was hashed as it
    /// was written.
    package func describe(_ path: String, url: String, sha256: String? = nil) throws -> PublishReport.WrittenFile {
        guard let size = FileSystem.fileSize(path) else { throw OfflinePkgError.io(path: path, operation: "stat", Errno.noEntry) }
        return .init(url: url, sha256: try sha256 ?? FileHasher.sha256(ofFile: path), size: size)
    }
}
