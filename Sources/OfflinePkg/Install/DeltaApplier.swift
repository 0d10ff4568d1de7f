#if canImport(Glibc)
import Glibc
#endif

/// Builds the tree of a new version in staging from an installed tree and a verified delta (docs/protocol.md#deltas):
/// every file of the old tree hard-linked (installed trees are read-only, so sharing their inodes is
/// safe and costs no space), the delta unpacked over them — the unpacker unlinks each target before it
/// writes, so the old tree is never written through — then the deletions. The tree listing comes from
/// the old index plus what the delta brought, with every shared file hashed again, and
/// `PackageInstaller.place` checks it against `tree`.
package struct DeltaApplier {
    package var limits: UnpackLimits
    /// The installed version the delta starts from, and its tree and index.
    package var baseVersion: String
    package var baseTree: String
    package var baseIndex: String
    /// Where the new tree's files are kept by content: unchanged files are linked from it, the old
    /// tree's files it lacks (a tree installed before the content store) join it once checked.
    package var content: ContentStore?

    package init(limits: UnpackLimits, baseVersion: String, baseTree: String, baseIndex: String, content: ContentStore? = nil) {
        self.limits = limits
        self.baseVersion = baseVersion
        self.baseTree = baseTree
        self.baseIndex = baseIndex
        self.content = content
    }

    /// Assembles the new tree in `staging` (an existing, empty folder) and returns its file listing and
    /// its folders.
    package func apply(delta archive: String, name: String, targetVersion: String, into staging: String) throws -> UnpackedTree {
        var files = try TreeIndexFile.decode(FileSystem.read(baseIndex, limit: 256 << 20), path: baseIndex)
        // Unchanged files: the held inode where the content store has it, else the old tree's.
        var fromContent = Set<PackagePath>()
        do {
            let writer = try TreeWriter(root: staging, replacesFiles: false)
            for path in TreeHash.sortedPaths(files) {
                if let content, content.contains(sha256: files[path]!.sha256) {
                    try content.link(sha256: files[path]!.sha256, into: writer, at: path)
                    fromContent.insert(path)
                } else {
                    try writer.linkFile(path.string, to: baseTree + "/" + path.string)
                }
            }
        } catch let conflict as TreeWriter.Conflict {
            throw OfflinePkgError.corruptState(path: baseIndex, reason: conflict.reason)
        }

        let unpacked = try ArchiveUnpacker(limits: limits, archiveName: name, isDelta: true, keepFile: content?.keepFile).unpack(
            archivePath: archive, into: staging)
        // The unpacker insists on the control member for a delta.
        let control = try DeltaControl.decode(unpacked.deltaControl ?? [], archive: name)
        guard control.from == baseVersion, control.to == targetVersion else {
            throw OfflinePkgError.archiveRefused(
                archive: name, entry: ArchivePath.deltaControlPath,
                reason: "turns \(control.from) into \(control.to), expected \(baseVersion) into \(targetVersion)")
        }
        for path in control.delete.map({ PackagePath($0) }) {
            guard files[path] != nil, unpacked.files[path] == nil else {
                throw OfflinePkgError.archiveRefused(
                    archive: name, entry: ArchivePath.deltaControlPath,
                    reason: "delete \"\(path)\": "
                        + (files[path] == nil ? "not a file of \(baseVersion)" : "the delta also writes it"))
            }
            try FileSystem.removeFile(staging + "/" + path.string)
            files[path] = nil
            Self.removeEmptyParents(of: path, in: staging)
        }
        // The files the new tree shares with the old one are hashed again, not taken on the old index's
        // word: a damaged base tree must not pass its damage on (docs/protocol.md#deltas: arrive at exactly `tree`).
        for path in TreeHash.sortedPaths(files) where unpacked.files[path] == nil {
            let actual = try FileHasher.sha256(ofFile: staging + "/" + path.string)
            guard actual == files[path]!.sha256 else {
                // Damaged held content must not be linked again on its name's word: unnamed, it is no
                // longer held, and the full archive that follows writes a sound copy (verify names the
                // trees still linking the damaged inode; repair rebuilds them).
                if let content, fromContent.contains(path) {
                    try? content.drop(sha256: files[path]!.sha256, problem: "sha256 \(actual), expected \(files[path]!.sha256) (its name)")
                }
                throw OfflinePkgError.corruptState(
                    path: baseTree + "/" + path.string,
                    reason: "the delta's base file has sha256 \(actual), expected \(files[path]!.sha256)")
            }
        }
        if let content {
            // The old tree's checked files the store lacked (a tree from before it) join it now.
            let writer = try TreeWriter(root: staging, replacesFiles: false)
            for path in TreeHash.sortedPaths(files) where unpacked.files[path] == nil && !fromContent.contains(path) {
                try content.insert(sha256: files[path]!.sha256, size: files[path]!.size, writtenBy: writer, at: path)
            }
        }
        files.merge(unpacked.files) { _, new in new }
        // The folders: those holding a file, plus those the delta made that the deletions left standing.
        var folders = unpacked.folders.filter { FileSystem.isDirectory(staging + "/" + $0.string) }
        for path in files.keys {
            var folder = path
            while let parent = folder.parent {
                folder = parent
                if !folders.insert(folder).inserted { break }
            }
        }
        return UnpackedTree(files: files, folders: folders, deltaControl: nil)
    }

    /// A folder the deletions emptied is gone in the new version too (trees list files only, and a full
    /// archive of the new site would not have it either, unless the site kept it empty on purpose).
    private static func removeEmptyParents(of path: PackagePath, in root: String) {
        var folder = path
        while let parent = folder.parent {
            folder = parent
            if rmdir(root + "/" + folder.string) != 0 { return }  // not empty: stop
        }
    }
}
