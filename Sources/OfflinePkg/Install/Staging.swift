import Dispatch
import FoundationEssentials
import Synchronization

/// Where an operation builds trees before they are installed: folders under `staging/`, on the same
/// file system as `trees/`, that only the root lock's holder writes. A tree unpacked, patched or linked
/// there is checked against its tree hash and sealed (`stage`); `commit` then makes every staged tree
/// of the operation durable and visible in `trees/` at once; `clear` removes what a crashed operation
/// left. The one owner of staging: installers, file fetches, repairs and the sync call it.
package struct Staging: Sendable {
    package let layout: CacheLayout

    package init(layout: CacheLayout) { self.layout = layout }

    /// A new, empty folder in staging for one tree (or its frames), named after `name` and unique.
    package func makeFolder(_ name: String) throws -> String {
        let folder = layout.stagingDirectory("\(name)-\(UUID().uuidString)")
        try FileSystem.makeDirectories(folder)
        return folder
    }

    /// Removes everything in staging: what an operation that did not finish left. Only the root lock's
    /// holder calls it.
    package func clear() throws {
        for name in FileSystem.contents(of: layout.staging) {
            try FileSystem.removeTree(layout.stagingDirectory(name))
        }
    }

    /// Checks a tree unpacked into `staged` against the manifest's tree hash, makes it read-only and
    /// writes its index beside it, still in staging. `folders` lists every folder under `staged`
    /// (relative paths). Nothing is visible in `trees/` until `commit` has flushed it. `pendingContent`
    /// lists the sha256s of the files not taken into content/ yet, each once, for `commit` to leave to
    /// the next operation.
    package func stage(
        _ files: [PackagePath: TreeFile], folders: Set<PackagePath>, in staged: String, entry: PackageEntry,
        pendingContent: [String] = []
    ) throws -> StagedTree {
        let sorted = SortedTree(files)
        let (actual, index, lookup) = Self.hashAndTables(sorted)
        guard actual == entry.tree else {
            throw OfflinePkgError.treeMismatch(package: "\(entry.id) \(entry.version)", expected: entry.tree, actual: actual)
        }
        FailPoint.afterUnpack.hit()
        // Files are born read-only (the unpacker writes them 0400; a delta's unchanged files are links
        // to an installed, read-only tree): only the folders need a chmod, and no walk of the tree. The
        // top folder is sealed last, once in place: a process that is not root cannot move a read-only
        // folder to another parent.
        try FileSystem.makeFoldersReadOnly(folders, under: staged)
        let staged = StagedTree(
            folder: staged, index: layout.index(ofTree: staged), lookup: layout.lookupTable(ofTree: staged),
            packageTrees: layout.packageTrees(entry.id),
            tree: layout.tree(id: entry.id, version: entry.version, treeHash: entry.tree),
            treeIndex: layout.treeIndex(id: entry.id, version: entry.version, treeHash: entry.tree),
            treeLookup: layout.treeLookup(id: entry.id, version: entry.version, treeHash: entry.tree),
            pendingContent: pendingContent)
        // No fsync of their own: `commit` flushes every staged tree of the sync in one syncfs.
        try FileSystem.write(index, to: staged.index)
        try FileSystem.write(lookup, to: staged.lookup, mode: 0o400)
        return staged
    }

    /// The tree hash, index and lookup table of `tree`, made side by side: at 100k files each is tens of
    /// milliseconds that one core would otherwise run one after another while the other core idles. The
    /// tables of a tree whose hash turns out wrong are thrown away.
    private static func hashAndTables(_ tree: SortedTree) -> (hash: String, index: [UInt8], lookup: [UInt8]) {
        let hash = Mutex("")
        let index = Mutex([UInt8]())
        let lookup = Mutex([UInt8]())
        DispatchQueue.concurrentPerform(iterations: 3) { part in
            switch part {
            case 0:
                let value = TreeHash.compute(tree)
                hash.withLock { $0 = value }
            case 1:
                let value = TreeIndexFile.encode(tree)
                index.withLock { $0 = value }
            default:
                let value = TreeLookupTable.encode(tree)
                lookup.withLock { $0 = value }
            }
        }
        return (hash.withLock { $0 }, index.withLock { $0 }, lookup.withLock { $0 })
    }

    /// Makes staged trees installed: one `syncfs` for all of them, each index and tree renamed into
    /// `trees/`, and a second `syncfs` for the renames. A tree in `trees/` is trusted without re-hashing
    /// (a later sync only checks it exists), so its bytes must be on disk before it becomes visible;
    /// without the flush a power cut after the rename could leave zero-length files in a tree that the
    /// next sync activates. One flush per sync rather than per package (1,000 packages made 1,001 syncfs
    /// calls), and after the downloads are deleted, so their pages are dropped rather than written to
    /// the disk a second time. A tree's pending content is listed in `content/.pending/` before the
    /// tree is renamed in, so the second flush makes both durable (`ContentStore.takeInPendingTrees`).
    /// Blocks for the flushes: run it off the cooperative pool (`runBlocking`).
    package func commit(_ trees: [StagedTree]) throws {
        guard !trees.isEmpty else { return }
        try FileSystem.syncFileSystem(containing: layout.staging)
        for staged in trees {
            try FileSystem.makeDirectories(staged.packageTrees)
            if !staged.pendingContent.isEmpty {
                // Without its list the tree is installed all the same, its files its own copies.
                try? FileSystem.makeDirectories(layout.pendingContent)
                try? FileSystem.writeAtomically(
                    ContentStore.pendingList(staged.pendingContent), to: layout.pendingContent(ofTree: staged.tree),
                    durable: false)
            }
            // The index and lookup table land first: a tree folder that exists is always complete and
            // indexed. A reader that mapped the table it replaces keeps reading that one.
            try FileSystem.rename(staged.index, to: staged.treeIndex)
            try FileSystem.rename(staged.lookup, to: staged.treeLookup)
            if FileSystem.exists(staged.tree) {
                // A repair of a damaged tree, or a leftover from a crash between the index and the
                // rename: swap in one step, so a reader of an active tree never finds the path missing.
                // Both folders change parents, so both must be writable for the swap.
                try FileSystem.unseal(staged.tree)
                try FileSystem.exchange(staged.folder, staged.tree)
                try FileSystem.seal(staged.tree)
                try FileSystem.removeTree(staged.folder)
            } else {
                try FileSystem.rename(staged.folder, to: staged.tree)
                // A crash before this leaves a complete tree whose top folder is writable; garbage
                // collection, the last stage of every sync, seals the trees it keeps.
                FailPoint.beforeSeal.hit()
                try FileSystem.seal(staged.tree)
            }
        }
        // The renames themselves are durable before an active set can name these trees.
        try FileSystem.syncFileSystem(containing: layout.trees)
    }
}

/// A verified, read-only tree in staging with its index and lookup table beside it, and where the three
/// go in `trees/`.
package struct StagedTree: Sendable, Equatable {
    package var folder: String
    package var index: String
    package var lookup: String
    package var packageTrees: String
    package var tree: String
    package var treeIndex: String
    package var treeLookup: String
    /// The sha256s of the tree's files that are not in content/ yet: listed by `commit` for the next
    /// operation to take in.
    package var pendingContent: [String] = []
}
