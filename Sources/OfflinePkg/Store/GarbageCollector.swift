/// Removes trees no set needs: keeps the active set, the one before it (for `rollback`), and every tree
/// a live reader still holds a lease on. Also clears downloads and staging, and seals the trees it keeps
/// (read-only top folders). Idempotent.
package struct GarbageCollector {
    package var layout: CacheLayout

    package struct Result: Sendable, Equatable {
        package var removedTrees: [String] = []
        package var keptForLeases: [String] = []
        /// Held content no remaining tree linked, and its bytes.
        package var removedContent: [String] = []
        package var removedContentBytes: Int64 = 0
    }

    @discardableResult
    package func collect() throws -> Result {
        var result = Result()
        let record = try ActiveRecord.load(layout)
        var keep = Set<String>()
        for set in [record.current, record.previous].compactMap({ $0 }) {
            for package in set.packages {
                keep.insert(layout.tree(id: package.id, version: package.version, treeHash: package.tree))
            }
        }
        // An unreadable lease means a reader we cannot account for: keep every tree this time.
        guard let leased = ReaderLease.liveTrees(layout: layout) else { return result }
        for id in FileSystem.contents(of: layout.trees) {
            let folder = layout.packageTrees(id)
            for name in FileSystem.contents(of: folder) {
                let path = folder + "/" + name
                // A tree's index and lookup table go with it.
                let companion = [".index", ".lookup"].first { name.hasSuffix($0) }
                let tree = companion.map { String(path.dropLast($0.count)) } ?? path
                if keep.contains(tree) {
                    // A crash between an install's rename and its seal leaves the top folder writable.
                    if companion == nil { try? FileSystem.seal(path) }
                    continue
                }
                if leased.contains(tree) {
                    if companion == nil { result.keptForLeases.append(tree) }
                    continue
                }
                try FileSystem.removeTree(path)
                if companion == nil { result.removedTrees.append(tree) }
            }
        }
        for name in FileSystem.contents(of: layout.downloads) { FileSystem.removeFile(layout.downloads + "/" + name) }
        // After the trees: content that only a removed tree linked is down to its own name now. A kept
        // or leased tree's files are links to their content, so that content has two names or more.
        for removed in ContentStore(layout: layout).removeUnlinked() {
            result.removedContent.append(removed.path)
            result.removedContentBytes += removed.size
        }
        return result
    }
}
