import Dispatch
import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Content taken in by the operation after the sync that installed it.
///
/// A sync of one package does not link its tree's new files into `content/` before it switches: that
/// is a directory entry a file, about as much kernel time as the file's creation, and so a large share of
/// a first install's CPU. It writes the sha256s of that new content to
/// `content/.pending/<id>+<tree folder>` before the tree is renamed into `trees/` (both made durable by
/// the sync's last flush), and the next locked operation of the root — `sync`, `gc`, `verify --repair` —
/// links each from the installed tree before it looks for held content. Until then the tree's files are
/// its own copies, as a tree installed before the content store keeps: `verify` hashes them, and `gc`
/// has none of their content to collect.
extension ContentStore {
    /// A pending-content list: one sha256 a line.
    static func pendingList(_ sha256s: some Sequence<String>) -> [UInt8] {
        var bytes = [UInt8]()
        for sha256 in sha256s {
            bytes += sha256.utf8
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }

    /// What every locked operation that changes the root does first: a root in the older content layout
    /// gets the current one (`moveLegacyShards`), and trees' pending content is taken in.
    package func catchUp() {
        moveLegacyShards()
        takeInPendingTrees()
    }

    /// Whether some installed tree's content waits to be taken in.
    package var hasPendingTrees: Bool { !FileSystem.contents(of: layout.pendingContent).isEmpty }

    /// The sha256s of the content installed trees wait to have taken in: for a plan that writes nothing
    /// (`sync --dry-run`), which counts them as held, as the sync it foretells takes them in first.
    package func pendingSha256s() -> Set<String> {
        var sha256s = Set<String>()
        for name in FileSystem.contents(of: layout.pendingContent) {
            guard let tree = layout.tree(ofPendingList: name), FileSystem.isDirectory(tree),
                let listed = try? FileSystem.read(layout.pendingContent + "/" + name, limit: 1 << 30)
            else { continue }
            sha256s.formUnion(Self.sha256s(inPendingList: listed))
        }
        return sha256s
    }

    /// The sha256s a pending-content list names (lines of anything else are left out).
    private static func sha256s(inPendingList bytes: [UInt8]) -> [String] {
        bytes.split(separator: UInt8(ascii: "\n")).compactMap { line in
            line.count == 64 ? String(decoding: line, as: UTF8.self) : nil
        }
    }

    /// Links into `content/` the listed files of every tree with a pending-content list, from the
    /// installed tree (the tree is trusted as it is: a later sync reuses it without hashing it, and each
    /// name taken in here is hashed before its first reuse, as any held content from an earlier
    /// operation is). An orphan at the name (a held file no tree links, left by a kill) is replaced.
    /// Best effort, as the layout's move is: a file whose content is held already, whose tree file is
    /// missing or of another size, or that cannot take another link (`EMLINK`, `EPERM`), stays the
    /// tree's own copy; a list goes once its tree was gone through, or when its tree is not installed
    /// (collected, or never renamed in); any other failure to link (a full disk) keeps the list for a
    /// later run. Counted in a session of the ledger of its own, whose close also collects the orphans
    /// a kill left (a figure left open is walked: the operation's own close would then count, not
    /// collect, them). Runs under the root lock, before anything is inserted.
    package func takeInPendingTrees() {
        let names = FileSystem.contents(of: layout.pendingContent)
        guard !names.isEmpty else { return }
        var tried = false
        for name in names {
            let list = layout.pendingContent + "/" + name
            guard let tree = layout.tree(ofPendingList: name) else {
                FileSystem.discardFile(list)
                continue
            }
            let outcome = takeIn(tree: tree, list: list)
            tried = tried || outcome.tried
            if !outcome.failed { FileSystem.discardFile(list) }
        }
        // The ledger's session opened at the first link tried: it is closed whatever came of them.
        if tried { _ = try? ledger.close(removingOrphans: true) }
    }

    /// Takes in the files of `tree` that `list` names: whether a link was tried, and whether one
    /// failed (the list then stays).
    private func takeIn(tree: String, list: String) -> (tried: Bool, failed: Bool) {
        let index = layout.index(ofTree: tree)
        guard FileSystem.isDirectory(tree), let listed = try? FileSystem.read(list, limit: 1 << 30),
            let indexBytes = try? FileSystem.read(index, limit: 1 << 30),
            let files = try? TreeIndexFile.decode(indexBytes, path: index)
        else { return (false, false) }
        var wanted = Set(Self.sha256s(inPendingList: listed))
        // One path a sha256, in path order; split by content folder (0-7 and 8-f), so the two threads
        // never link into the same folder.
        var halves: [[(path: PackagePath, file: TreeFile)]] = [[], []]
        for entry in SortedTree(files).entries where wanted.remove(entry.file.sha256) != nil {
            halves[(entry.file.sha256.utf8.first ?? 0) < UInt8(ascii: "8") ? 0 : 1].append(entry)
        }
        let work = halves
        let outcome = Mutex((tried: !work.allSatisfy(\.isEmpty), failed: false))
        DispatchQueue.concurrentPerform(iterations: work.count) { half in
            for (path, file) in work[half] {
                let source = layout.file(path, inTree: tree)
                guard let own = Self.status(of: source), Int64(own.st_size) == file.size else { continue }
                do {
                    try takeIn(source, file)
                } catch OfflinePkgError.io(_, _, let error) where [EMLINK, EPERM].contains(error.rawValue) {
                    continue
                } catch {
                    outcome.withLock { $0.failed = true }
                }
            }
        }
        return outcome.withLock { $0 }
    }

    /// Links the installed tree's file `source` to its content name; an orphan standing there (no tree
    /// links it) goes first, as `insert` replaces one.
    private func takeIn(_ source: String, _ file: TreeFile) throws {
        let held = path(sha256: file.sha256)
        for _ in 0..<2 {
            if try linkNew(fd: AT_FDCWD, name: source, to: held, sha256: file.sha256, size: file.size, shown: source, hashed: false) {
                return
            }
            guard let standing = Self.status(of: held), standing.st_nlink == 1, unlink(held) == 0 else { return }
            ledger.removed(file.sha256, size: Int64(standing.st_size))
        }
    }
}
