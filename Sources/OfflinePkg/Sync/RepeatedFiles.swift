import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The files of a tree being unpacked whose bytes an earlier file of the same tree has: each is made a
/// link to that file as soon as its lane has written it, so the copy's pages are dropped before any
/// flush sees them. A first install flushes its tree while the lanes still write (`EarlyFlush`); a
/// repeat linked only at staging would by then have been written to the disk for nothing (eight copies
/// of one 6 MiB file wrote 50 MB instead of 6).
final class RepeatedFiles: Sendable {
    private let root: String
    private let store: ContentStore
    /// The first finished file of each sha256. Only a closed file is listed, so a link always reaches
    /// whole bytes.
    private let first = Mutex([String: PackagePath]())

    /// Repeats within the tree being unpacked into the staging folder `root`.
    init(under root: String, store: ContentStore) {
        self.root = root
        self.store = store
    }

    /// The lanes' `keepFile`: lists a new file's bytes, or links a repeat to the file listed for them.
    var keepFile: (TreeWriter, PackagePath, TreeFile) throws -> Void {
        { [self] _, path, file in
            let original: PackagePath? = first.withLock { listed in
                if let earlier = listed[file.sha256] { return earlier }
                listed[file.sha256] = path
                return nil
            }
            guard let original else { return }
            try Self.link(root + "/" + path.string, to: root + "/" + original.string, store: store)
        }
    }

    /// Replaces the file at `path` with a link to `original`, in one step (a link in `content/.tmp/`,
    /// renamed over the copy, so the name is never missing). A file at the link limit (`EMLINK`) keeps
    /// its copy.
    static func link(_ path: String, to original: String, store: ContentStore) throws {
        let temporary = store.temporaryPath()
        do throws(Errno) { _ = try valueOrErrno { linkat(AT_FDCWD, original, AT_FDCWD, temporary, 0) } } catch {
            if error.rawValue == EMLINK { return }
            throw OfflinePkgError.io(path: "\(original) -> \(temporary)", operation: "link", error)
        }
        do { try FileSystem.rename(temporary, to: path) } catch {
            unlink(temporary)
            throw error
        }
    }
}
