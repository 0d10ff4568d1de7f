import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// Where things live in a publisher's repository, the folder that is copied as is to a CDN:
///
///     repo/
///       manifest.json  manifest.json.minisig
///       archives/<id>/<version>/<id>-<version>.<ext>              full archives
///       archives/<id>/<version>/<id>-<from>-to-<version>.delta.<ext> deltas into <version>
///       files/<sha256>.json.zst                         a chunked archive's file index, named by its bytes' hash
///       files/deltas/<tree>-<sha256>.json.zst           what changed in that index since a version's tree
///       files/deltas/<tree>.json.zst                    the same, into the newest index (rewritten by each publish)
///       trees/<id>/<version>.index                      "<sha256> <size> <path>" per file of a published version
///       trees/<id>/versions                             published versions, oldest first, one a line
///       signatures/<sha256 of manifest.json>.minisig    each manifest's signature under a name no edge holds stale
///       signatures/<sha256>.<KEYID>.minisig             one per manifest key that signed it (a threshold)
///       keys/<N>.json                                   keys documents, version 1, 2, … (never rewritten)
///       keys/<N>.json.<KEYID>.minisig                   one per root key that signed version N
///       trees/<id>/history.jsonl                        one line per publish: version, time, notes, the entry
///       trees/expires-in                                `--expires-in` seconds, applied at every publish
///       .publish.lock                                   flock'd by the one publish at a time (not uploaded)
///       .tmp/                                           a running publish's scratch files (not uploaded;
///                                                       cleared by the next publish)
///
/// `trees/` is the publisher's memory: with it a later publish writes deltas without the old sites.
/// Devices never read it.
package struct RepositoryLayout: Sendable {
    package let root: String

    /// A repository is what a web server serves, often as another user than the publisher: its folders
    /// and files are readable by all, where a device's cache root is its user's alone (docs/protocol.md#neighbours-on-the-device, and
    /// `FileSystem`'s private defaults).
    package static let folderMode: mode_t = 0o755
    package static let fileMode: mode_t = 0o644

    package init(root: String) {
        var root = root
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        self.root = root
    }

    package var manifest: String { root + "/manifest.json" }
    package var lock: String { root + "/.publish.lock" }
    package var signature: String { root + "/manifest.json.minisig" }
    package var archives: String { root + "/archives" }
    package var trees: String { root + "/trees" }

    /// Archive URLs as the manifest writes them: relative to the manifest. A folder per id and version
    /// (neither may hold a `/`) keeps names unambiguous: `app` 1-2 and `app-1` 2 never share a file.
    package func archiveURL(id: String, version: String, format: ArchiveFormat) -> String {
        "archives/\(id)/\(version)/\(id)-\(version).\(format.fileExtension)"
    }

    package func deltaURL(id: String, from: String, to: String, format: ArchiveFormat) -> String {
        "archives/\(id)/\(to)/\(id)-\(from)-to-\(to).delta.\(format.fileExtension)"
    }

    /// A chunked archive's file index (docs/protocol.md#chunked-archives-and-file-indexes), named by the sha256 of its compressed bytes: written
    /// once, never rewritten, so an edge may cache it forever; the same index is one file for everyone.
    package func fileIndexURL(sha256: String) -> String { "files/\(sha256).json.zst" }

    /// A file-index delta (`FileIndexDelta`): from a published tree to the index `sha256`, next to it.
    package func fileIndexDeltaURL(fromTree tree: String, index sha256: String) -> String {
        FileIndexDelta.url(nextTo: fileIndexURL(sha256: sha256), fromTree: tree, index: sha256)
    }

    /// The file behind a relative URL this layout made.
    package func path(ofURL url: String) -> String { root + "/" + url }

    /// Scratch files live in `.tmp/`, on the same file system as their final names and under no name a
    /// device or a CDN sync would take for published (docs/publishing.md, "Uploading").
    package var scratch: String { root + "/.tmp" }
    package func temporary(_ name: String) -> String { scratch + "/" + name }
    package var signatures: String { root + "/signatures" }
    package func immutableSignature(manifestSHA256: String) -> String { signatures + "/\(manifestSHA256).minisig" }
    /// One manifest key's signature of the manifest with this sha256.
    package func keySignature(manifestSHA256: String, keyID: String) -> String {
        signatures + "/\(manifestSHA256).\(keyID).minisig"
    }
    package var keys: String { root + "/keys" }
    package func keysDocument(version: Int) -> String { keys + "/\(version).json" }
    package func keysSignature(version: Int, keyID: String) -> String { keys + "/\(version).json.\(keyID).minisig" }
    package func publishHistory(id: String) -> String { packageTrees(id) + "/history.jsonl" }
    package var expiresIn: String { trees + "/expires-in" }

    package func packageTrees(_ id: String) -> String { trees + "/" + id }
    package func treeIndex(id: String, version: String) -> String { packageTrees(id) + "/" + version + ".index" }
    package func versionLog(id: String) -> String { packageTrees(id) + "/versions" }
}
