import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Every installed file kept once by its content: `content/<2 hex>/<sha256>`, read-only, and every
/// installed tree's file a hard link to it, so identical files across packages and versions share one
/// inode and one copy of their bytes (SPEC §13).
///
/// Nothing is written here that a tree does not also name: the unpacker writes each file into its
/// staging tree, then links that inode in (`insert`). So held content appears before the tree's rename,
/// and it is made durable by the same one flush per sync (`PackageInstaller.commit`). A held file that no
/// tree links (`st_nlink == 1`) is an orphan of an interrupted sync: harmless, collected by `gc`, and never
/// trusted on its name's word (a power cut before that sync's flush may have left it short), so
/// `contains` does not count it and the next insert of its sha256 replaces it.
package struct ContentStore: Sendable {
    package let layout: CacheLayout

    package init(layout: CacheLayout) {
        self.layout = layout
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

    /// Takes the file just written at `path` of the tree `writer` builds, whose bytes hash to `sha256`,
    /// into the store: its inode becomes the held file; or, when that content is held already, the
    /// tree's name is switched to the held inode and the new one dropped. Returns false when the tree
    /// keeps its own copy (the held inode has as many links as the file system allows).
    @discardableResult
    package func insert(sha256: String, writtenBy writer: TreeWriter, at path: PackagePath) throws -> Bool {
        let held = self.path(sha256: sha256)
        return try writer.withParent(of: path.string) { parent, name in
            let shown = writer.root + "/" + path.string
            if try linkNew(fd: parent.rawValue, name: name, to: held, sha256: sha256, shown: shown) { return true }
            // Already the held inode (a delta's unchanged file linked from the old tree): nothing to do.
            if let heldFile = Self.status(of: held), let own = Self.status(of: parent, name),
                heldFile.st_ino == own.st_ino && heldFile.st_dev == own.st_dev
            {
                return true
            }
            if contains(sha256: sha256) {
                // Held and trusted: the tree's name becomes a link to it, in one rename, so the tree
                // never lacks the name (the rename drops the inode just written).
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
            return true
        }
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
        if try linkNew(fd: AT_FDCWD, name: temporary, to: held, sha256: sha256, shown: temporary) { return }
        if !contains(sha256: sha256) { try FileSystem.rename(temporary, to: held) }
    }

    /// Links `name` (below `fd`) to the held name; false when that name exists already. Makes the shard
    /// folder when missing (a root from before the content store has no `content/`).
    private func linkNew(fd: Int32, name: String, to held: String, sha256: String, shown: String) throws -> Bool {
        for attempt in 0..<2 {
            do throws(Errno) {
                _ = try valueOrErrno { linkat(fd, name, AT_FDCWD, held, 0) }
                FailPoint.contentLink.hit()
                return true
            } catch {
                switch error.rawValue {
                case EEXIST: return false
                case ENOENT where attempt == 0:
                    try FileSystem.makeDirectories(layout.contentShard(sha256.prefix(2)))
                    try FileSystem.makeDirectories(layout.contentTemporary)
                default: throw OfflinePkgError.io(path: "\(shown) -> \(held)", operation: "link", error)
                }
            }
        }
        return false
    }

    /// Every held file: its path, sha256 (its name), size and link count. Names that are not a sha256
    /// are left out (nothing else writes here).
    package func heldFiles(_ body: (_ path: String, _ sha256: String, _ info: stat) throws -> Void) rethrows {
        for shard in FileSystem.contents(of: layout.content) where shard.utf8.count == 2 {
            let folder = layout.contentShard(shard)
            for name in FileSystem.contents(of: folder) where name.utf8.count == 64 && name.hasPrefix(shard) {
                let path = folder + "/" + name
                if let info = Self.status(of: path) { try body(path, name, info) }
            }
        }
    }

    /// Removes held files no tree links (`st_nlink == 1`) and every temporary; returns what went. Runs
    /// under the root lock, after the trees to remove are gone: no insert is under way.
    package func removeUnlinked() -> [(path: String, size: Int64)] {
        var removed = [(path: String, size: Int64)]()
        heldFiles { path, _, info in
            if info.st_nlink == 1 && unlink(path) == 0 { removed.append((path, Int64(info.st_size))) }
        }
        for name in FileSystem.contents(of: layout.contentTemporary) { FileSystem.removeFile(layout.contentTemporaryFile(name)) }
        return removed
    }

    /// How many files are held and their bytes (`status`).
    package func usage() -> (files: Int, bytes: Int64) {
        var files = 0
        var bytes: Int64 = 0
        heldFiles { _, _, info in
            files += 1
            bytes += Int64(info.st_size)
        }
        return (files, bytes)
    }

    static func status(of folder: FileDescriptor, _ name: String) -> stat? {
        var info = stat()
        guard fstatat(folder.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return info
    }

    static func status(of path: String) -> stat? {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return info
    }
}
