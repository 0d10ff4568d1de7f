import OfflinePkg

/// The checks a device makes on a release, made by the publisher on what it built before anything takes
/// a published name, with the device's own code: the full archive through the device's unpacker (its
/// format, entry and size rules, and `UnpackLimits`: the devices' defaults unless told otherwise), the
/// tree it unpacks to against the tree hash the manifest will carry, and a chunked archive's file index
/// through the device's index reader. A device that refuses a package's archive refuses its whole
/// release, every other package's update with it, so a release devices would refuse is never published.
///
/// The unpacker verifies (`ArchiveUnpacker.verify`): every rule of an unpack and every file hashed, no
/// file created. Writing the tree out would double the publish's file work and check nothing more about
/// the archive: every refusal that is the archive's fault (a duplicate path, a path both a file and a
/// folder, a name too long) is made before a byte is written; what only writing meets (a full disk, a
/// file system that folds case) belongs to the device, not the release.
///
/// Deltas and the file index are not needed for an install (a device falls back to the full archive
/// when they fail); the full archive is, so it is the one verified.
extension Publisher {
    /// Verifies the archive at `archive` (listed as `url`) as a device would unpack it, and checks that
    /// the tree it unpacks to has the hash `tree`; `fileIndex` (its scratch path and the reference the
    /// manifest will hold) is read and checked against the same tree.
    func checkAsDevice(
        archive: String, url: String, tree: String, archiveSize: Int64, fileIndex: (path: String, reference: FileIndexReference)?,
        limits: UnpackLimits = UnpackLimits()
    ) throws {
        let unpacked: UnpackedTree
        do {
            unpacked = try ArchiveUnpacker(limits: limits, archiveName: url).verify(archivePath: archive)
        } catch let error as OfflinePkgError {
            throw OfflinePkgError.publishRefused(reason: "devices would refuse this release: \(error)")
        }
        let unpackedTree = TreeHash.compute(unpacked.files)
        guard unpackedTree == tree else {
            throw OfflinePkgError.publishRefused(
                reason: "devices would refuse this release: \(url) unpacks to tree \(unpackedTree), not the site's \(tree)")
        }
        guard let fileIndex else { return }
        do {
            let compressed = try FileSystem.read(fileIndex.path, limit: Int(fileIndex.reference.size))
            let json = try FileIndex.decompress(compressed, source: fileIndex.reference.url)
            let index = try FileIndex.decode(json: json, archiveSize: archiveSize, source: fileIndex.reference.url)
            var listed = [PackagePath: TreeFile]()
            for entry in index.entries { listed[entry.path] = TreeFile(archived: entry.sha256, size: entry.size) }
            guard TreeHash.compute(listed) == tree else {
                throw OfflinePkgError.publishRefused(
                    reason: "devices would refuse the file index \(fileIndex.reference.url): it lists another tree than \(tree)")
            }
        } catch let error as OfflinePkgError {
            if case .publishRefused = error { throw error }
            throw OfflinePkgError.publishRefused(reason: "devices would refuse the file index: \(error)")
        }
    }
}
