#if canImport(Glibc)
import Glibc
#endif

/// A cache root is its user's alone (docs/protocol.md#neighbours-on-the-device): folders 0700 (0500 once read-only), files 0600 (0400),
/// made so by `FileSystem`'s defaults and the tree writer. An older offlinepkg made roots 0755 with 0644
/// files, which let every user of the device list them, read the stored API answers and manifest, and
/// test which URLs were cached: at its next sync such a root is tightened, once.
package enum RootModes {
    /// Takes every group and other permission bit off the root and everything below it, when the root
    /// has any; one `lstat` when it has none (the walk is not repeated). Symbolic links are left alone:
    /// `chmod` would change their targets.
    package static func tighten(_ layout: CacheLayout) {
        var info = stat()
        guard lstat(layout.root, &info) == 0, info.st_mode & 0o077 != 0 else { return }
        tighten(Array(layout.root.utf8))
    }

    /// Refuses a root that another user owns, whoever the caller is: a folder someone else made at the
    /// root's path beforehand — in a shared folder such as /tmp, or a link there — would let them read,
    /// replace or plant links among everything this user keeps in it, and feed `serve` their own files.
    /// Root is no exception either way: writing as root into a folder another user can change is how
    /// that user steers root's writes and mode changes outside it, and a root of root's is no other
    /// user's (a root-owned folder such as /tmp is anyone's to plant in). `path` is the root with its links resolved; a
    /// root that is not there yet is the caller's to make.
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

    private static func tighten(_ path: [UInt8]) {
        FileSystem.withCPath(path) { cPath in
            var info = stat()
            guard lstat(cPath, &info) == 0 else { return }
            let type = info.st_mode & S_IFMT
            guard type != S_IFLNK else { return }
            // A read-only folder is still readable by its owner: the walk goes in before the chmod.
            if type == S_IFDIR {
                for name in FileSystem.entryNames(ofBytes: path) { tighten(path + [UInt8(ascii: "/")] + name) }
            }
            if info.st_mode & 0o077 != 0 { chmod(cPath, info.st_mode & 0o7700) }
        }
    }
}
