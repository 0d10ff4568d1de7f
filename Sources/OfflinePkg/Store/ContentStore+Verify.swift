import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `verify`'s pass over `content/`: each held file hashed once against its name, however many trees link
/// it, and a damaged one named with every tree path that links it (one damaged inode damages them all).
struct ContentCheck {
    let store: ContentStore
    /// sha256 (the held file's name) → the hash of its bytes when they differ, nil when sound.
    private var checked: [String: String?] = [:]

    init(store: ContentStore) {
        self.store = store
    }

    struct Held {
        var path: String
        /// The bytes' sha256 when it is not the name; nil when sound.
        var actual: String?
    }

    /// Checks the tree file at `treeFile` through the held file of `sha256` when it is a link to it; nil
    /// when it is not (a tree from before the content store keeps its own copy: the caller hashes it).
    mutating func check(_ treeFile: String, sha256: String) throws -> Held? {
        let held = store.path(sha256: sha256)
        guard let heldInfo = ContentStore.status(of: held), let own = ContentStore.status(of: treeFile),
            heldInfo.st_ino == own.st_ino && heldInfo.st_dev == own.st_dev
        else { return nil }
        return Held(path: held, actual: try hashOnce(held, sha256: sha256))
    }

    private mutating func hashOnce(_ path: String, sha256: String) throws -> String? {
        if let known = checked[sha256] { return known }
        let actual = try FileHasher.sha256(ofFile: path)
        checked[sha256] = actual == sha256 ? nil : actual
        return checked[sha256]!
    }

    /// Every held file checked (those no active tree links too), and each damaged one with the tree
    /// paths, in any installed tree, that link it.
    mutating func remainingDamage(layout: CacheLayout) throws -> [(path: String, problem: String)] {
        var damaged = [(path: String, sha256: String, actual: String)]()
        try store.heldFiles { path, sha256, _ in
            if let actual = try hashOnce(path, sha256: sha256) { damaged.append((path, sha256, actual)) }
        }
        guard !damaged.isEmpty else { return [] }
        let linking = store.trees(linking: Set(damaged.map(\.sha256)))
        return damaged.map { item in
            let users = linking.flatMap { tree in tree.paths.filter { $0.sha256 == item.sha256 }.map { tree.folder + "/" + $0.path.string } }
            let named = users.isEmpty ? "no tree links it" : "linked by " + users.sorted().joined(separator: ", ")
            return (item.path, "sha256 \(item.actual), expected \(item.sha256) (its name); \(named)")
        }
    }
}

extension ContentStore {
    /// An installed tree some of whose files are links to held content of interest.
    struct LinkingTree {
        var folder: String
        var index: String
        var lookup: String
        var packageTrees: String
        var paths: [(path: PackagePath, sha256: String)]
    }

    /// The installed trees (active or not) whose files are links to the held files named by `sha256s`:
    /// read from each tree's index, confirmed by inode.
    func trees(linking sha256s: Set<String>) -> [LinkingTree] {
        var inodes = [String: (ino: ino_t, dev: dev_t)]()
        for sha256 in sha256s {
            if let info = Self.status(of: path(sha256: sha256)) { inodes[sha256] = (info.st_ino, info.st_dev) }
        }
        var found = [LinkingTree]()
        for id in FileSystem.contents(of: layout.trees) {
            let packageTrees = layout.packageTrees(id)
            for name in FileSystem.contents(of: packageTrees) where name.hasSuffix(".index") {
                let index = packageTrees + "/" + name
                let folder = String(index.dropLast(".index".count))
                guard let bytes = try? FileSystem.read(index, limit: 1 << 30),
                    let files = try? TreeIndexFile.decode(bytes, path: index)
                else { continue }
                var paths = [(path: PackagePath, sha256: String)]()
                for (path, file) in files {
                    guard let held = inodes[file.sha256], let own = Self.status(of: folder + "/" + path.string),
                        own.st_ino == held.ino && own.st_dev == held.dev
                    else { continue }
                    paths.append((path, file.sha256))
                }
                if !paths.isEmpty {
                    found.append(
                        LinkingTree(folder: folder, index: index, lookup: folder + ".lookup", packageTrees: packageTrees, paths: paths))
                }
            }
        }
        return found
    }

    /// A copy of an installed tree in staging, every file a link to held content where the store holds
    /// it and to the tree's own file otherwise, its index and lookup table copied: `repair` swaps it in
    /// once damaged content was replaced, so no tree keeps linking the damaged inode.
    func relinkedCopy(of tree: LinkingTree) throws -> StagedTree {
        let files = try TreeIndexFile.decode(FileSystem.read(tree.index, limit: 1 << 30), path: tree.index)
        let staging = layout.stagingDirectory("relink-\(UUID().uuidString)")
        try FileSystem.makeDirectories(staging)
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
            try FileSystem.write(lookup, to: staging + ".lookup", mode: 0o444)
        } catch {
            try? FileSystem.removeTree(staging)
            throw error
        }
        return StagedTree(
            folder: staging, index: staging + ".index", lookup: staging + ".lookup", packageTrees: tree.packageTrees,
            tree: tree.folder, treeIndex: tree.index, treeLookup: tree.lookup)
    }
}
