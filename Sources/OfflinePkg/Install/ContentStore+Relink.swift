import FoundationEssentials

extension ContentStore {
    /// A copy of an installed tree in staging, every file a link to held content where the store holds
    /// it and to the tree's own file otherwise, its index and lookup table copied: `repair` swaps it in
    /// once damaged content was replaced, so no tree keeps linking the damaged inode.
    func relinkedCopy(of tree: LinkingTree) throws -> StagedTree {
        let files = try TreeIndexFile.decode(FileSystem.read(tree.index, limit: 1 << 30), path: tree.index)
        let staging = try Staging(layout: layout).makeFolder("relink")
        do {
            let writer = try TreeWriter(root: staging, replacesFiles: false)
            var folders = Set<PackagePath>()
            for path in TreeHash.sortedPaths(files) {
                let sha256 = files[path]!.sha256
                if contains(sha256: sha256) {
                    try link(sha256: sha256, into: writer, at: path)
                } else {
                    try writer.linkFile(path.string, to: tree.folder + "/" + path.string)
                }
                var folder = path
                while let parent = folder.parent, folders.insert(parent).inserted { folder = parent }
            }
            try FileSystem.makeFoldersReadOnly(folders, under: staging)
            try FileSystem.write(FileSystem.read(tree.index, limit: 1 << 30), to: staging + ".index")
            let lookup = FileSystem.exists(tree.lookup) ? try FileSystem.read(tree.lookup, limit: 1 << 30) : TreeLookupTable.encode(files)
            try FileSystem.write(lookup, to: staging + ".lookup", mode: 0o400)
        } catch {
            try? FileSystem.removeTree(staging)
            throw error
        }
        return StagedTree(
            folder: staging, index: staging + ".index", lookup: staging + ".lookup", packageTrees: tree.packageTrees,
            tree: tree.folder, treeIndex: tree.index, treeLookup: tree.lookup)
    }
}
