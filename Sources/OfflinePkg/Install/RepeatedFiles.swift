import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The files of a tree being unpacked whose bytes an earlier file of the same tree has: each is made a
/// link to that file as soon as its lane has written it, so the tree holds each content once and the
/// copy's pages are dropped before any flush sees them. A first install flushes its tree while the
/// lanes still write (`EarlyFlush`); a repeat linked only at staging would by then have been written to
/// the disk for nothing (eight copies of one 6 MiB file wrote 50 MB instead of 6).
final class RepeatedFiles: Sendable {
    private let store: ContentStore
    /// The first finished file of each sha256. Only a closed file is listed, so a link always reaches
    /// whole bytes.
    private let first = Mutex([String: PackagePath]())

    /// Repeats within one tree; links go through `store`'s `content/.tmp/`, on the same file system.
    init(store: ContentStore) { self.store = store }

    /// The sha256 of every file noted, each once: the tree's content that is not in content/ yet.
    var contents: [String] { first.withLock { Array($0.keys) } }

    /// Notes the file `writer` just wrote at `path`, or makes it a link to the first file with its bytes.
    func keep(_ path: PackagePath, _ file: TreeFile, writtenBy writer: TreeWriter) throws {
        let original: PackagePath? = first.withLock { listed in
            if let earlier = listed[file.sha256] { return earlier }
            listed[file.sha256] = path
            return nil
        }
        guard let original else { return }
        _ = try link(path, to: original, writer: writer)
    }

    /// Makes `path`, not written yet, a link to the first finished file with its bytes; false when no
    /// file with them is finished yet, or that one is at the link limit: the lane writes it and `keep`
    /// notes it. A repeat then costs no create, no writes, and no copy deleted again.
    func reuse(_ path: PackagePath, _ file: TreeFile, writtenBy writer: TreeWriter) throws -> Bool {
        guard let original = first.withLock({ $0[file.sha256] }) else { return false }
        return try link(path, to: original, writer: writer)
    }

    /// Makes `path` a link to `original`, replacing any copy there in one step (a link in
    /// `content/.tmp/`, renamed over the copy, so the name is never missing). Both names are reached
    /// through the writer's folder descriptors, as the lanes wrote them: never a path walk that could
    /// follow a link, nor one longer than PATH_MAX (a 4,000-byte path in a deep root). False when
    /// `original` is at the link limit (`EMLINK`): a copy there stays.
    private func link(_ path: PackagePath, to original: PackagePath, writer: TreeWriter) throws -> Bool {
        let temporary = store.temporaryPath()
        let made = try writer.withParent(of: original.string) { parent, name in
            do throws(Errno) {
                _ = try valueOrErrno { linkat(parent.rawValue, name, AT_FDCWD, temporary, 0) }
                return true
            } catch {
                if error.rawValue == EMLINK { return false }
                throw OfflinePkgError.io(path: "\(writer.root)/\(original.string) -> \(temporary)", operation: "link", error)
            }
        }
        guard made else { return false }
        do {
            try writer.withParent(of: path.string) { parent, name in
                do throws(Errno) { _ = try valueOrErrno { renameat(AT_FDCWD, temporary, parent.rawValue, name) } } catch {
                    throw OfflinePkgError.io(path: "\(temporary) -> \(writer.root)/\(path.string)", operation: "rename", error)
                }
            }
        } catch {
            unlink(temporary)
            throw error
        }
        return true
    }
}
