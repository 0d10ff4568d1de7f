import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The one authority on where things live in a cache root: no code in Store, Sync or Fetch joins a
/// path of the root's layout itself. (Inside a tree it was handed, the unpacker and `DeltaApplier`
/// join package paths to the tree's folder; `file(_:inTree:)` is that join for everyone else.)
///
/// Everything below the root is its user's alone (docs/protocol.md#neighbours-on-the-device): folders 0700, files 0600, installed
/// trees 0500 and 0400 (`RootModes` tightens a root an older build left open).
///
///     root/
///       active.json             the active set (and the one before it), switched by atomic rename
///       state.json              manifest validators, accepted sequence, last check time
///       manifest.json           the last accepted manifest, byte for byte (+ manifest.json.minisig)
///       manifest.json.signatures  the signatures it was accepted with under a keys document, JSON
///       device-id               random UUID, for rollout buckets
///       lock                    flock'd by the one sync at a time
///       history.json            the last activations (bounded), rewritten atomically
///       launch.json             launches of the active set and whether the host confirmed it
///       trees/<id>/<version>-<tree prefix>/          installed trees, read-only
///       trees/<id>/<version>-<tree prefix>.index     "<sha256> <size> <path>" per file
///       trees/<id>/<version>-<tree prefix>.lookup    the tree's lookup table, memory-mapped by readers
///       content/<hex digit>/<sha256>                 every installed file once by content (0400); trees' files link it
///       content/.tmp/<pid>-<random>                  content being inserted or relinked, same file system
///       content.json            held content's files and bytes (`status`), "open" while a sync changes them
///       downloads/<sha256>.part (+ .meta)            partial downloads, resumable
///       staging/<name>/         unpacking in progress, same file system as trees/
///       leases/<pid>-<random>   one per open reader store, flock'd while it lives
///       tls/key.pem             serve --tls: ECDSA P-256 key (0600), made once
///       tls/certificate.pem     self-signed, the active set's hosts + loopback names; re-issued, same key
///       runtime/entries/<key>.meta      one stored runtime answer's head (docs/protocol.md#the-runtime-cache); names its body
///       runtime/bodies/<key>-<random>   the bodies, written whole before their head names them
///       runtime/tmp/<pid>-<random>      bodies being received
///       runtime/stats.json              hit and miss counters
///       reports/queue.jsonl     install reports waiting to be sent (docs/protocol.md#install-reports), one JSON object a line
///       reports/state.json      where they go (the manifest's reports URL), the last send's outcome
///       reports/lock            flock'd by whoever changes the two
public struct CacheLayout: Sendable, Equatable {
    public let root: String

    public init(root: String) {
        var root = root
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        self.root = root
    }

    package var activeSet: String { root + "/active.json" }
    package var state: String { root + "/state.json" }
    package var storedManifest: String { root + "/manifest.json" }
    package var storedSignature: String { root + "/manifest.json.minisig" }
    package var storedSignatures: String { root + "/manifest.json.signatures" }
    package var deviceID: String { root + "/device-id" }
    package var lock: String { root + "/lock" }
    package var history: String { root + "/history.json" }
    /// The unbounded append-only history of earlier builds, read once and then removed.
    package var legacyHistory: String { root + "/history.jsonl" }
    package var launches: String { root + "/launch.json" }
    /// How each origin answered `Range` requests (`OriginRanges`).
    package var origins: String { root + "/origins.json" }
    package var trees: String { root + "/trees" }
    package var downloads: String { root + "/downloads" }
    package var staging: String { root + "/staging" }
    package var leases: String { root + "/leases" }
    package var content: String { root + "/content" }
    package var contentTemporary: String { content + "/.tmp" }
    /// The running figure of held content (`ContentLedger`).
    package var contentUsage: String { root + "/content.json" }
    package var tls: String { root + "/tls" }
    package var tlsKey: String { tls + "/key.pem" }
    package var tlsCertificate: String { tls + "/certificate.pem" }

    package func packageTrees(_ id: String) -> String { trees + "/" + id }

    package var reports: String { root + "/reports" }
    package var reportQueue: String { reports + "/queue.jsonl" }
    package var reportState: String { reports + "/state.json" }
    package var reportLock: String { reports + "/lock" }
    /// A name listed in `reports/` (an atomic writer's temporary).
    package func reportsEntry(_ name: String) -> String { reports + "/" + name }

    package var runtime: String { root + "/runtime" }
    package var runtimeEntries: String { runtime + "/entries" }
    package var runtimeBodies: String { runtime + "/bodies" }
    package var runtimeTemporary: String { runtime + "/tmp" }
    package var runtimeStats: String { runtime + "/stats.json" }
    package func runtimeEntry(key: String) -> String { runtimeEntries + "/" + key + ".meta" }
    package func runtimeBody(_ name: String) -> String { runtimeBodies + "/" + name }
    package func runtimeTemporaryFile(_ name: String) -> String { runtimeTemporary + "/" + name }

    /// The installed tree of one version of a package. The tree hash prefix tells apart two publishes
    /// that reused a version string for other content.
    package func tree(id: String, version: String, treeHash: String) -> String {
        packageTrees(id) + "/" + version + "-" + treeHash.prefix(16)
    }

    package func treeIndex(id: String, version: String, treeHash: String) -> String {
        index(ofTree: tree(id: id, version: version, treeHash: treeHash))
    }

    /// The memory-mapped lookup table of an installed tree (`TreeLookupTable`).
    package func treeLookup(id: String, version: String, treeHash: String) -> String {
        lookupTable(ofTree: tree(id: id, version: version, treeHash: treeHash))
    }

    /// The suffixes of the files that go with an installed tree (`.index`, `.lookup`), for the collector.
    package static let treeCompanionSuffixes = [indexSuffix, lookupSuffix]
    private static let indexSuffix = ".index"
    private static let lookupSuffix = ".lookup"

    /// The index and lookup table beside a tree folder (installed or staged).
    package func index(ofTree tree: String) -> String { tree + Self.indexSuffix }
    package func lookupTable(ofTree tree: String) -> String { tree + Self.lookupSuffix }

    /// One name listed in `trees/<id>/` (a tree, or a tree's companion file).
    package func packageTreesEntry(_ id: String, _ name: String) -> String { packageTrees(id) + "/" + name }

    /// The tree folder a name listed in `trees/<id>/` belongs to: itself, or the tree its `.index` or
    /// `.lookup` goes with; `isCompanion` tells which.
    package func owningTree(ofEntry path: String) -> (tree: String, isCompanion: Bool) {
        guard let suffix = Self.treeCompanionSuffixes.first(where: { path.hasSuffix($0) }) else { return (path, false) }
        return (String(path.dropLast(suffix.count)), true)
    }

    /// A file of an installed tree, by its package path.
    package func file(_ path: PackagePath, inTree tree: String) -> String { tree + "/" + path.string }

    /// A name listed in the root itself (an atomic writer's temporary, say).
    package func rootEntry(_ name: String) -> String { root + "/" + name }

    /// One lease file; `hidden` is the name it has until its lock is taken.
    package func lease(_ name: String, hidden: Bool = false) -> String { leases + (hidden ? "/." : "/") + name }

    /// A name listed in `downloads/`.
    package func download(_ name: String) -> String { downloads + "/" + name }

    package func partialDownload(sha256: String) -> String { downloads + "/" + sha256 + ".part" }
    package func partialDownloadMeta(sha256: String) -> String { downloads + "/" + sha256 + ".meta" }
    package func stagingDirectory(_ name: String) -> String { staging + "/" + name }

    /// The folder of held content whose sha256 starts with `prefix`: its first hex digit, or (a root in
    /// the older layout, until `ContentStore.moveLegacyShards()` has run) its first two.
    package func contentShard(_ prefix: some StringProtocol) -> String { content + "/" + prefix }
    /// The one held file with this sha256 (lowercase hex), shared by every tree that has such a file.
    /// Sixteen folders, not 256: a fresh root's first sync made 256 folders (a quarter more inodes than
    /// a 1,000-file site's own), and 16 still keep the two threads that link content apart.
    package func content(sha256: String) -> String { contentShard(sha256.prefix(1)) + "/" + sha256 }
    package func contentTemporaryFile(_ name: String) -> String { contentTemporary + "/" + name }

    /// The lists of installed trees whose new content is not taken into `content/` yet
    /// (`ContentStore.takeInPendingTrees`): one file a tree, `<id>+<tree folder name>`.
    package var pendingContent: String { content + "/.pending" }

    /// The pending-content list of the installed tree `tree` (`trees/<id>/<folder>`): its last two
    /// components joined by `+`, no look at the disk.
    package func pendingContent(ofTree tree: String) -> String {
        let parts = tree.split(separator: "/").suffix(2)
        return pendingContent + "/" + parts.joined(separator: "+")
    }

    /// The installed tree a pending-content list names, or nil for a name no list has.
    package func tree(ofPendingList name: String) -> String? {
        guard let plus = name.firstIndex(of: "+"), ManifestRules.isValidID(String(name[..<plus])) else { return nil }
        let folder = name[name.index(after: plus)...]
        guard !folder.isEmpty, !folder.contains("/"), folder != ".", folder != ".." else { return nil }
        return packageTrees(String(name[..<plus])) + "/" + folder
    }

    /// The default root: `$OFFLINEPKG_ROOT`, else `$XDG_DATA_HOME/offlinepkg`, else `~/.local/share/offlinepkg`.
    public static func defaultRoot(environment: [String: String]) -> String {
        if let root = environment["OFFLINEPKG_ROOT"], !root.isEmpty { return root }
        if let data = environment["XDG_DATA_HOME"], !data.isEmpty { return data + "/offlinepkg" }
        let home = environment["HOME"] ?? getpwuid(getuid()).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } } ?? "/"
        return home + "/.local/share/offlinepkg"
    }

    /// Creates the folders of a fresh root.
    package func prepare() throws {
        try writing {
            for path in [root, trees, downloads, staging, leases, content, contentTemporary] { try FileSystem.makeDirectories(path) }
        }
    }

    /// Runs `body`, which makes or writes the root's own files: a refusal by the file system there
    /// (`EACCES`, `EPERM`, `EROFS`) is reported as the root not being writable, naming the root.
    package func writing<Result>(_ body: () throws -> Result) throws -> Result {
        do {
            return try body()
        } catch OfflinePkgError.io(let path, let operation, let errno) where [EACCES, EPERM, EROFS].contains(errno.rawValue) {
            throw OfflinePkgError.rootNotWritable(root: root, path: path, operation: operation, errno)
        }
    }
}
