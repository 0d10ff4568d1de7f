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

    /// Refuses a root that another user owns (root excepted, and root may use any): a folder someone else
    /// made at the root's path beforehand — in a shared folder such as /tmp, or a link there — would let
    /// them read, replace or plant links among everything this user keeps in it, and feed `serve` their
    /// own files. `path` is the root with its links resolved.
    package static func checkOwner(_ path: String) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        let me = geteuid()
        guard me != 0, info.st_uid != me, info.st_uid != 0 else { return }
        let owner = getpwuid(info.st_uid).map { " (\(String(cString: $0.pointee.pw_name)))" } ?? ""
        throw OfflinePkgError.unavailable(
            "cache root \(path) is owned by uid \(info.st_uid)\(owner), not by this user (uid \(me)): refused, a cache root is its user's alone"
        )
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
