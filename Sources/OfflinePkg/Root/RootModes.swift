#if canImport(Glibc)
import Glibc
#endif

/// A cache root is its user's alone (docs/protocol.md#neighbours-on-the-device): folders 0700 (0500 once read-only), files 0600 (0400),
/// made so by `FileSystem`'s defaults and the tree writer. An older offlinepkg made roots 0755 with 0644
/// files, which let every user of the device list them, read the stored API answers and manifest, and
/// test which URLs were cached: at its next sync such a root is tightened, once.
package enum RootModes {
    /// Takes every group and other permission bit off the root and everything below it, when the root
    /// has any; one `fstat` when it has none (the walk is not repeated). The walk goes by descriptor, never
    /// by path: each entry is opened below its folder's descriptor with `O_NOFOLLOW`, and `fstat` and
    /// `fchmod` act on what was opened. A symbolic link is skipped, never followed nor changed (`chmod`
    /// would change its target), and a folder swapped for a link while the walk runs is not entered: by
    /// path, the mode change would land on whatever the link points at, outside the root.
    package static func tighten(_ layout: CacheLayout) {
        guard let root = try? FileDescriptor.openFolder(path: layout.root) else { return }
        root.closeAfter { root in
            guard let info = try? root.status(), info.st_mode & 0o077 != 0 else { return }
            tighten(root, info, depth: 0)
        }
    }

    /// Far deeper than any tree a site holds; each level keeps one descriptor open while it is walked.
    private static let maximumDepth = 128

    /// Refuses a root that another user owns, whoever the caller is: a folder someone else made at the
    /// root's path beforehand — in a shared folder such as /tmp, or a link there — would let them read,
    /// replace or plant links among everything this user keeps in it, and feed `serve` their own files.
    /// Root is no exception either way: writing as root into a folder another user can change is how
    /// that user steers root's writes and mode changes outside it, and a root of root's is no other
    /// user's (a root-owned folder such as /tmp is anyone's to plant in). `path` is the root with its
    /// links resolved; a root that is not there yet is the caller's to make.
    package static func checkOwner(_ path: String) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        let me = geteuid()
        guard info.st_uid != me else { return }
        throw OfflinePkgError.unavailable(
            "cache root \(path) is owned by uid \(info.st_uid)\(userName(info.st_uid)), not by this user (uid \(me)\(userName(me))): refused, a cache root is its user's alone"
        )
    }

    private static func userName(_ uid: uid_t) -> String {
        getpwuid(uid).map { " (\(String(cString: $0.pointee.pw_name)))" } ?? ""
    }

    /// Tightens the entries of `entry` (when it is a folder), then `entry` itself: a read-only folder is
    /// still readable by its owner, so the walk goes in before the `fchmod`.
    private static func tighten(_ entry: FileDescriptor, _ info: stat, depth: Int) {
        let type = info.st_mode & S_IFMT
        if type == S_IFDIR && depth < maximumDepth {
            for name in (try? entry.entryNames()) ?? [] {
                // A link fails the open (ELOOP); a name gone or unreadable meanwhile is left as it is.
                guard let child = try? entry.openEntry(name) else { continue }
                child.closeAfter { child in
                    guard let childInfo = try? child.status() else { return }
                    tighten(child, childInfo, depth: depth + 1)
                }
            }
        }
        guard type == S_IFDIR || type == S_IFREG, info.st_mode & 0o077 != 0 else { return }
        try? entry.setMode(info.st_mode & 0o7700)
    }
}
