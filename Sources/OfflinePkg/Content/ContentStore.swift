import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// Every installed file kept once by its content: `content/<hex digit>/<sha256>`, read-only, and every
/// installed tree's file a hard link to it, so identical files across packages and versions share one
/// inode and one copy of their bytes (docs/design.md, "Content store").
///
/// Nothing is written here that a tree does not also name: the unpacker writes each file into its
/// staging tree, then links that inode in (`insert`: as it is written, or in `Staging.commit`
/// while the flush runs). So held content appears before the tree's rename, and it is made durable by
/// the sync's flushes. A held file that no tree links (`st_nlink == 1`) is an orphan of an interrupted
/// sync: harmless, collected by `gc`, and never trusted on its name's word (a power cut before that
/// sync's flushes may have left it short), so `contains` does not count it and the next insert of its
/// sha256 replaces it.
package struct ContentStore: Sendable {
    package let layout: CacheLayout
    /// Runs right after a file is first linked into `content/` (the sync's `content-link` fail point:
    /// fail points belong to the layer above).
    package var afterLink: (@Sendable () -> Void)?
    /// The root's running figure of held content, told of every name created or removed here.
    package let ledger: ContentLedger

    package init(layout: CacheLayout, afterLink: (@Sendable () -> Void)? = nil) {
        self.layout = layout
        self.afterLink = afterLink
        ledger = ContentLedger.of(layout)
    }

    /// Whether a file with this sha256 is held and linked by some tree, so a new tree can link it
    /// instead of fetching or writing its bytes.
    package func contains(sha256: String) -> Bool {
        guard let info = Self.status(of: path(sha256: sha256)) else { return false }
        return info.st_nlink > 1
    }

    /// Where the file with this sha256 is (or would be) held.
    package func path(sha256: String) -> String {
        layout.content(sha256: sha256)
    }

    /// Makes `path` of the tree `writer` builds a hard link to the held file `sha256` (which must be
    /// held: see `contains`). A delta's writer unlinks the name first.
    package func link(sha256: String, into writer: TreeWriter, at path: PackagePath) throws {
        try writer.linkFile(path.string, to: self.path(sha256: sha256))
    }

    /// Makes `path` of the tree `writer` builds a link to the held file of `sha256` before anything is
    /// written there, when this locked operation has hashed that content sound (it inserted the bytes,
    /// or `checkedForReuse` read them): a file that repeats one of this sync is never written as a copy
    /// only to be swapped for the link. False otherwise, or when the link cannot be made (the name
    /// gone, the link limit): the caller writes the file and `insert` takes it in. Asks nothing of the
    /// disk for content not known here, so a file with new bytes costs no extra call.
    package func linkHeld(sha256: String, into writer: TreeWriter, at path: PackagePath) throws -> Bool {
        guard ledger.isKnownSound(sha256) else { return false }
        return try writer.linkFileIfPossible(path.string, to: self.path(sha256: sha256))
    }

    /// Takes the file just written at `path` of the tree `writer` builds, whose bytes hash to `sha256`,
    /// into the store: its inode becomes the held file; or, when that content is held already, the
    /// tree's name is switched to the held inode and the new one dropped. Returns false when the tree
    /// keeps its own copy (the held inode has as many links as the file system allows). `size`, when
    /// given, is counted for `status` without a stat.
    @discardableResult
    package func insert(sha256: String, size: Int64? = nil, writtenBy writer: TreeWriter, at path: PackagePath) throws -> Bool {
        let held = self.path(sha256: sha256)
        return try writer.withParent(of: path.string) { parent, name in
            let shown = writer.root + "/" + path.string
            // A second round only after held content was found damaged and dropped (or raced away).
            for _ in 0..<3 {
                if try linkNew(fd: parent.rawValue, name: name, to: held, sha256: sha256, size: size, shown: shown) {
                    return true
                }
                // Already the held inode (a delta's unchanged file linked from the old tree): nothing to do.
                if let heldFile = Self.status(of: held), let own = Self.status(of: parent, name),
                    heldFile.st_ino == own.st_ino && heldFile.st_dev == own.st_dev
                {
                    return true
                }
                if contains(sha256: sha256) {
                    // Held and linked, but trusted only once hashed in this sync: a damaged inode would
                    // otherwise replace the sound bytes just written, in this tree and every later one.
                    guard try checkedForReuse(sha256: sha256) else { continue }
                    // The tree's name becomes a link to it, in one rename, so the tree never lacks the
                    // name (the rename drops the inode just written).
                    let temporary = temporaryPath()
                    do throws(Errno) { _ = try valueOrErrno { linkat(AT_FDCWD, held, AT_FDCWD, temporary, 0) } } catch {
                        if error.rawValue == EMLINK { return false }
                        throw OfflinePkgError.io(path: "\(held) -> \(temporary)", operation: "link", error)
                    }
                    do throws(Errno) { _ = try valueOrErrno { renameat(AT_FDCWD, temporary, parent.rawValue, name) } } catch {
                        unlink(temporary)
                        throw OfflinePkgError.io(path: "\(temporary) -> \(shown)", operation: "rename", error)
                    }
                    return true
                }
                // An orphan: replaced by the file just written, whose bytes were hashed on the way in.
                let temporary = temporaryPath()
                do throws(Errno) { _ = try valueOrErrno { linkat(parent.rawValue, name, AT_FDCWD, temporary, 0) } } catch {
                    throw OfflinePkgError.io(path: "\(shown) -> \(temporary)", operation: "link", error)
                }
                try FileSystem.rename(temporary, to: held)
                ledger.replaced(sha256)
                return true
            }
            // Held content that keeps turning out damaged: this tree keeps its own, sound copy.
            return false
        }
    }

    /// Removes a staging tree that will not be installed (an install that failed): the files inserted
    /// from it are left with no tree linking them, so the ledger's close looks for those orphans.
    package func discardStaging(_ folder: String) {
        ledger.stagingDiscarded()
        try? FileSystem.removeTree(folder)
    }

    /// `insert(sha256:size:writtenBy:at:)` as the unpacker's `keepFile`.
    package var keepFile: (TreeWriter, PackagePath, TreeFile) throws -> Void {
        { writer, path, file in try insert(sha256: file.sha256, size: file.size, writtenBy: writer, at: path) }
    }

    /// `linkHeld(sha256:into:at:)` as the unpacker's `reuseFile`.
    package var reuseFile: (TreeWriter, PackagePath, TreeFile) throws -> Bool {
        { writer, path, file in try linkHeld(sha256: file.sha256, into: writer, at: path) }
    }

    /// A fresh name in `content/.tmp/` to write a file at before `insert(temporary:sha256:)` (the folder
    /// exists once the root is prepared).
    package func temporaryPath() -> String {
        layout.contentTemporaryFile("\(getpid())-\(UUID().uuidString)")
    }

    /// Takes the finished, read-only file at `temporary` (in `content/.tmp/`, its bytes hashing to
    /// `sha256`) into the store under its name, replacing an orphan, and removes the temporary name. An
    /// already held, linked copy stands and the temporary is dropped.
    package func insert(temporary: String, sha256: String) throws {
        defer { unlink(temporary) }
        let held = path(sha256: sha256)
        if try linkNew(fd: AT_FDCWD, name: temporary, to: held, sha256: sha256, size: nil, shown: temporary) { return }
        if !contains(sha256: sha256) {
            try FileSystem.rename(temporary, to: held)
            ledger.replaced(sha256)
        }
    }

    /// Links `name` (below `fd`) to the held name; false when that name exists already. Makes the shard
    /// folder when missing (a root from before the content store has no `content/`). `hashed` as the
    /// ledger's `created` takes it.
    func linkNew(
        fd: Int32, name: String, to held: String, sha256: String, size: Int64?, shown: String, hashed: Bool = true
    ) throws -> Bool {
        try ledger.willChange()
        for attempt in 0..<2 {
            do throws(Errno) {
                _ = try valueOrErrno { linkat(fd, name, AT_FDCWD, held, 0) }
                ledger.created(sha256, size: size, hashed: hashed)
                afterLink?()
                return true
            } catch {
                switch error.rawValue {
                case EEXIST: return false
                case ENOENT where attempt == 0:
                    try FileSystem.makeDirectories(layout.contentShard(sha256.prefix(1)))
                    try FileSystem.makeDirectories(layout.contentTemporary)
                default: throw OfflinePkgError.io(path: "\(shown) -> \(held)", operation: "link", error)
                }
            }
        }
        return false
    }

    /// Every held file: its path, sha256 (its name), size and link count. Names that are not a sha256
    /// are left out (nothing else writes here). A root whose move from the old layout has not finished
    /// (`moveLegacyShards`) has files in both kinds of folder; a file with both names (a move a kill
    /// interrupted) is given once, by its new name.
    package func heldFiles(_ body: (_ path: String, _ sha256: String, _ info: stat) throws -> Void) rethrows {
        for shard in FileSystem.contents(of: layout.content) where Self.isShard(shard) {
            let folder = layout.contentShard(shard)
            let legacy = shard.utf8.count == 2
            for name in FileSystem.contents(of: folder) where name.utf8.count == 64 && name.hasPrefix(shard) {
                let path = folder + "/" + name
                guard let info = Self.status(of: path) else { continue }
                if legacy, let new = Self.status(of: self.path(sha256: name)),
                    new.st_ino == info.st_ino && new.st_dev == info.st_dev
                {
                    continue
                }
                try body(path, name, info)
            }
        }
    }

    /// A shard folder's name: one lowercase hex digit, or two (the older layout), as held names are.
    static func isShard(_ name: String) -> Bool {
        (1...2).contains(name.utf8.count) && name.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// Whether any content is held at all (a shard folder exists): one directory read, not a walk.
    package func holdsAny() -> Bool { Self.holdsAny(in: layout) }

    static func holdsAny(in layout: CacheLayout) -> Bool {
        FileSystem.contents(of: layout.content).contains(where: isShard)
    }

    /// Moves a root in the older layout (256 shard folders, `content/<2 hex>/<sha256>`) to 16 folders.
    /// Each held file is renamed, never copied: its inode and its trees' links stay as they are, and it
    /// has one name under `content/` at every moment (a link, then an unlink, where the file system has
    /// no `RENAME_NOREPLACE`; a kill between them leaves two names, and the next run drops the old one).
    /// When the new name exists already, it stands and the old one goes. A file that cannot be moved
    /// (a full disk, a folder the user cannot write) keeps its old name and is moved by a later run:
    /// `heldFiles` sees both layouts, so `gc` and the figure still count it; until then a new tree
    /// writes its own copy of that content instead of sharing it. A session of the ledger is opened at
    /// the first change and closed by a walk. Runs under the root lock, before anything is inserted.
    package func moveLegacyShards() {
        let legacy = FileSystem.contents(of: layout.content).filter { $0.utf8.count == 2 && Self.isShard($0) }
        guard !legacy.isEmpty else { return }
        var opened = false
        defer { if opened { _ = try? ledger.close(removingOrphans: false, walk: true) } }
        var folders = Set<Substring>()
        for shard in legacy {
            let folder = layout.contentShard(shard)
            for name in FileSystem.contents(of: folder) where name.utf8.count == 64 && name.hasPrefix(shard) {
                if !opened {
                    // No figure can be opened (content.json not writable): nothing is changed.
                    guard (try? ledger.willChange()) != nil else { return }
                    ledger.uncounted()
                    opened = true
                }
                if !folders.contains(name.prefix(1)) {
                    guard (try? FileSystem.makeDirectories(layout.contentShard(name.prefix(1)))) != nil else { continue }
                    folders.insert(name.prefix(1))
                }
                Self.move(folder + "/" + name, to: path(sha256: name))
            }
            // Whatever could not be moved keeps the folder.
            rmdir(folder)
        }
    }

    /// One held file's move to its new name (see `moveLegacyShards`); on any other failure it stays
    /// where it is, for a later run.
    private static func move(_ old: String, to new: String) {
        switch FileSystem.renameWithoutReplacing(old, to: new) {
        case EEXIST:
            unlink(old)
        case EINVAL, ENOSYS:
            if linkat(AT_FDCWD, old, AT_FDCWD, new, 0) == 0 || errno == EEXIST { unlink(old) }
        default:
            break
        }
    }

    /// Removes, of the held files named by `candidates` (the content of trees just removed), those no
    /// tree links any more (`st_nlink == 1`); then closes the ledger's session, which collects the
    /// orphans it created (an install that failed) or, when its count is not exact (`walk`, a root from
    /// an older release, a session a kill left open), walks every held file. Clears the temporaries.
    /// Returns what went. Runs under the root lock, after the trees to remove are gone: no insert is under way.
    package func removeUnlinked(candidates: Set<String>, walk: Bool) throws -> [(path: String, size: Int64)] {
        var removed = [(path: String, size: Int64)]()
        if !walk {
            for sha256 in candidates {
                let path = self.path(sha256: sha256)
                guard let info = Self.status(of: path), info.st_nlink == 1 else { continue }
                try ledger.willChange()
                if unlink(path) == 0 {
                    ledger.removed(sha256, size: Int64(info.st_size))
                    removed.append((path, Int64(info.st_size)))
                }
            }
        }
        removed += try ledger.close(removingOrphans: true, walk: walk)
        for name in FileSystem.contents(of: layout.contentTemporary) { FileSystem.discardFile(layout.contentTemporaryFile(name)) }
        return removed
    }

    /// How many files are held and their bytes (`status`): the ledger's closed figure, else (a sync under
    /// way or killed, a root from an older release) a walk.
    package func usage() -> (files: Int, bytes: Int64) {
        if let figure = ledger.closedFigure() { return (figure.files, figure.bytes) }
        return walkedUsage()
    }

    /// Every held file counted, whatever the ledger says (`verify`).
    package func walkedUsage() -> (files: Int, bytes: Int64) {
        var files = 0
        var bytes: Int64 = 0
        heldFiles { _, _, info in
            files += 1
            bytes += Int64(info.st_size)
        }
        return (files, bytes)
    }

    /// Whether the held file of `sha256` may be linked into a new tree: held, linked by a tree, and its
    /// bytes hashing to its name, hashed once per locked operation (a sync). Held content is shared by
    /// every tree that has such a file, so one damaged inode (bit rot, an edit by root) would otherwise
    /// spread into every new tree. A damaged one is dropped (`drop`): false, and the caller fetches or
    /// writes the file instead.
    package func checkedForReuse(sha256: String) throws -> Bool {
        guard contains(sha256: sha256) else { return false }
        if ledger.isKnownSound(sha256) { return true }
        let actual: String
        do { actual = try FileHasher.sha256(ofFile: path(sha256: sha256)) } catch { actual = "unreadable (\(error))" }
        if actual == sha256 {
            ledger.noteSound(sha256)
            return true
        }
        try drop(sha256: sha256, problem: "sha256 \(actual), expected \(sha256) (its name)")
        return false
    }

    /// Stops holding the damaged file of `sha256`: its name goes (the trees linking it keep the inode;
    /// `verify` names them), the ledger counts it, and the damage waits to be reported by the sync.
    package func drop(sha256: String, problem: String) throws {
        let path = self.path(sha256: sha256)
        guard let info = Self.status(of: path) else { return }
        try ledger.willChange()
        do throws(Errno) { _ = try valueOrErrno { unlink(path) } } catch {
            throw OfflinePkgError.io(path: path, operation: "unlink", error)
        }
        ledger.removed(sha256, size: Int64(info.st_size))
        ledger.noteDamage(path: path, problem: problem + "; no longer held, its file is fetched again")
    }

    static func status(of folder: FileDescriptor, _ name: String) -> stat? {
        var info = stat()
        guard fstatat(folder.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            return nil
        }
        return info
    }

    static func status(of path: String) -> stat? {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return info
    }
}
