/// Removes trees no set needs: keeps the active set, the one before it (for `rollback`), and every tree
/// a live reader still holds a lease on. Also clears downloads and staging, and seals the trees it keeps
/// (read-only top folders). Idempotent.
///
/// Held content is collected from what changed, not from a walk of `content/`: the files named by each
/// removed tree's index, and the ones this process's session created (`ContentLedger`), are removed when
/// no tree links them any more. `walk` (the `gc` command), a root without a believable figure, or a
/// removed tree whose index is unreadable walk every held file instead, once.
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
    package func collect(walk: Bool = false) throws -> Result {
        var result = Result()
        // The content of the trees removed, from their indexes: the only held files that can have lost
        // their last tree link here.
        var candidates = Set<String>()
        var walk = walk
        var listed = Set<String>()
        func noteContent(of tree: String) {
            guard !walk, listed.insert(tree).inserted else { return }
            let index = layout.index(ofTree: tree)
            guard let bytes = try? FileSystem.read(index, limit: 1 << 30), let files = try? TreeIndexFile.decode(bytes, path: index) else {
                // No list of its files (a tree cut short, a damaged index): only a walk finds its content.
                if FileSystem.isDirectory(tree) { walk = true }
                return
            }
            for file in files.values { candidates.insert(file.sha256) }
        }
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
            for name in FileSystem.contents(of: layout.packageTrees(id)) {
                let path = layout.packageTreesEntry(id, name)
                // A tree's index and lookup table go with it.
                let (tree, isCompanion) = layout.owningTree(ofEntry: path)
                if keep.contains(tree) {
                    // A crash between an install's rename and its seal leaves the top folder writable.
                    if !isCompanion { try? FileSystem.seal(path) }
                    continue
                }
                if leased.contains(tree) {
                    if !isCompanion { result.keptForLeases.append(tree) }
                    continue
                }
                noteContent(of: tree)
                // The figure opens before the first tree goes: a kill after it would otherwise leave a
                // closed figure, believed, and content that only the removed tree linked collected never.
                try ContentLedger.of(layout).willChange()
                try FileSystem.removeTree(path)
                if !isCompanion {
                    result.removedTrees.append(tree)
                    FailPoint.gcAfterTree.hit()
                }
            }
        }
        for name in FileSystem.contents(of: layout.downloads) { FileSystem.discardFile(layout.download(name)) }
        // After the trees: content that only a removed tree linked is down to its own name now. A kept
        // or leased tree's files are links to their content, so that content has two names or more.
        for removed in try ContentStore(layout: layout).removeUnlinked(candidates: candidates, walk: walk) {
            result.removedContent.append(removed.path)
            result.removedContentBytes += removed.size
        }
        return result
    }
}
