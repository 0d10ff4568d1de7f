import FoundationEssentials

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
        // The running figure is checked against this walk, when no sync changed it meanwhile.
        let figure = store.ledger.closedFigure()
        var (files, bytes) = (0, Int64(0))
        try store.heldFiles { path, sha256, info in
            files += 1
            bytes += Int64(info.st_size)
            if let actual = try hashOnce(path, sha256: sha256) { damaged.append((path, sha256, actual)) }
        }
        var problems = [(path: String, problem: String)]()
        // Damaged content may have changed size as well as bytes: then only the count of files is
        // compared (the repair of that damage writes the walked figure anyway).
        if let figure, figure == store.ledger.closedFigure(), figure.files != files || (damaged.isEmpty && figure.bytes != bytes) {
            problems.append(
                (layout.contentUsage, "counts \(figure.files) files of \(figure.bytes) bytes, content/ holds \(files) files of \(bytes) bytes"))
        }
        guard !damaged.isEmpty else { return problems }
        let linking = store.trees(linking: Set(damaged.map(\.sha256)))
        return problems + damaged.map { item in
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
}
