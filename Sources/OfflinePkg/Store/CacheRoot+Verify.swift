import FoundationEssentials

/// A file of an active tree that no longer matches what was installed (or, with `packageID`
/// `TreeDamage.runtimeCache`, a broken runtime-cache entry).
package struct TreeDamage: Sendable, Codable, Equatable {
    package static let runtimeCache = "(runtime cache)"
    /// The `packageID` of a damaged file of `content/` (its `path`); each active tree path linking it is
    /// reported under its own package too.
    package static let contentStore = "(content store)"

    package var packageID: String
    package var version: String
    package var path: String
    package var problem: String
}

extension CacheRoot {
    /// Re-hashes every file of the active trees against what was installed; returns what differs.
    package func verify() throws -> [TreeDamage] {
        var damage = [TreeDamage]()
        var content = ContentCheck(store: ContentStore(layout: layout))
        for package in try ActiveRecord.load(layout).current.packages {
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            let indexPath = layout.treeIndex(id: package.id, version: package.version, treeHash: package.tree)
            func report(_ path: String, _ problem: String) {
                damage.append(TreeDamage(packageID: package.id, version: package.version, path: path, problem: problem))
            }
            let files: [PackagePath: TreeFile]
            do {
                files = try TreeIndexFile.decode(FileSystem.read(indexPath, limit: 1 << 30), path: indexPath)
            } catch {
                report("", "the tree index is unreadable: \(error)")
                continue
            }
            if TreeHash.compute(files) != package.tree { report("", "the tree index does not match the tree hash") }
            let lookupPath = layout.treeLookup(id: package.id, version: package.version, treeHash: package.tree)
            if let problem = Self.lookupTableProblem(lookupPath, files: files) { report("", problem) }
            var onDisk = Set<PackagePath>()
            TreeWalker.regularFiles(in: tree) { onDisk.insert($0) }
            for path in TreeHash.sortedPaths(files) {
                guard onDisk.contains(path) else {
                    report(path.string, "missing")
                    continue
                }
                let expected = files[path]!.sha256
                // A link to held content is checked through it, once for all the trees sharing it.
                if let held = try content.check(layout.file(path, inTree: tree), sha256: expected) {
                    if let actual = held.actual { report(path.string, "sha256 \(actual), expected \(expected), in its content \(held.path)") }
                    continue
                }
                let actual = try FileHasher.sha256(ofFile: layout.file(path, inTree: tree))
                if actual != expected { report(path.string, "sha256 \(actual), expected \(expected)") }
            }
            for path in onDisk.subtracting(files.keys).sorted() { report(path.description, "not part of the package") }
        }
        for item in try content.remainingDamage(layout: layout) {
            damage.append(TreeDamage(packageID: TreeDamage.contentStore, version: "", path: item.path, problem: item.problem))
        }
        for item in RuntimeStore.verify(layout) {
            damage.append(TreeDamage(packageID: TreeDamage.runtimeCache, version: "", path: item.path, problem: item.problem))
        }
        return damage
    }

    /// Why the lookup table at `path` does not answer exactly `files`, or nil. A tree installed before
    /// tables were written has none, and answers from its index: that is no damage.
    private static func lookupTableProblem(_ path: String, files: [PackagePath: TreeFile]) -> String? {
        guard FileSystem.exists(path) else { return nil }
        let table: TreeLookupTable
        do { table = try TreeLookupTable(contentsOf: path) } catch { return "the lookup table is unreadable: \(error)" }
        guard table.fileCount == files.count else {
            return "the lookup table lists \(table.fileCount) files, the index \(files.count)"
        }
        for (path, file) in files {
            let number = path.bytes.withUnsafeBytes { table.find($0) }
            guard let number, table.record(number) == .init(sha256: file.sha256, size: file.size) else {
                return "the lookup table disagrees with the index on \(path)"
            }
        }
        return nil
    }
}
