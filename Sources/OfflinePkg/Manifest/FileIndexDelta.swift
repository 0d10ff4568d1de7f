/// A file-index delta (SPEC §13, docs/publishing.md): what a device that holds one tree of a package needs
/// of a newer version's file index, so that an update costs index bytes in proportion to what changed,
/// not to the size of the site. Next to the index, named by the tree it starts from and the index it
/// stands for, so a device finds it without any list:
///
///     files/deltas/<tree hash of the old version>-<sha256 of the new index file>.json.zst
///
/// zstd-compressed JSON, keys in this order:
///
///     {"from":"<old tree hash>","index":"<sha256 of the new index file>",
///      "delete":["<path>",…],
///      "files":[{"path","sha256","size","offset","length"},…]}
///
/// `delete`: the old tree's paths the new one lacks, sorted by their bytes. `files`: the new index's
/// entries whose path is new or whose content changed, sorted by path bytes, with their ranges in the
/// new archive, by the rules of a file index. Every other file of the new tree is the old tree's file at
/// the same path. The manifest does not sign the delta; the device checks what it gives instead: the
/// old tree's files with the delta applied must hash to the manifest's `tree` (which covers every path
/// and sha256), before anything is fetched, and each fetched file is checked by its sha256 and size as
/// with a full index. A delta that fails any of that (or names a range that unpacks to something else)
/// is dropped, and the full index is used in the same sync.
package struct FileIndexDelta: Sendable, Equatable {
    package var from: String
    package var index: String
    package var delete: [PackagePath]
    package var files: [FileIndex.Entry]

    package init(from: String, index: String, delete: [PackagePath], files: [FileIndex.Entry]) {
        self.from = from
        self.index = index
        self.delete = delete
        self.files = files
    }

    /// A decompressed delta larger than this is refused, as an index is.
    package static let maximumSize = FileIndex.maximumSize

    /// The delta's URL, from the new index's URL as the manifest names it (absolute or relative): the
    /// same folder, `deltas/<from>-<index>.json.zst`.
    package static func url(nextTo indexURL: String, fromTree: String, index: String) -> String {
        let folder = indexURL.lastIndex(of: "/").map { String(indexURL[...$0]) } ?? ""
        return folder + "deltas/\(fromTree)-\(index).json.zst"
    }

    /// The newest delta from a tree: `deltas/<from>.json.zst` beside the index, the same bytes as the
    /// delta from that tree into the newest release's index, rewritten by each publish. A device fetches
    /// it beside the manifest, from the index URL of the manifest it holds, before it knows the new
    /// index; it is used only when its `index` is the one the new manifest names.
    package static func newestURL(nextTo indexURL: String, fromTree: String) -> String {
        let folder = indexURL.lastIndex(of: "/").map { String(indexURL[...$0]) } ?? ""
        return folder + "deltas/\(fromTree).json.zst"
    }

    /// The delta between `old` (a tree's files) and `new` (a file index's entries, sorted by path).
    package init(from fromTree: String, old: [PackagePath: TreeFile], new: [FileIndex.Entry], index: String) {
        var kept = Set<PackagePath>()
        var changed = [FileIndex.Entry]()
        for entry in new {
            kept.insert(entry.path)
            if old[entry.path] != TreeFile(sha256: entry.sha256, size: entry.size) { changed.append(entry) }
        }
        self.init(from: fromTree, index: index, delete: old.keys.filter { !kept.contains($0) }.sorted(), files: changed)
    }

    /// Parses and checks a delta for an archive of `archiveSize` bytes, strictly as a file index is read.
    package static func decode(json: [UInt8], archiveSize: Int64, source: String) throws -> FileIndexDelta {
        let (document, fail) = try FileIndex.parse(json, source: source)
        guard let object = document.root.object else { throw fail("(document)", "expected a JSON object") }
        func hash(_ key: String) throws -> String {
            guard let value = object[key]?.string, Hex.isLowercase(value, count: 64) else {
                throw fail(key, "expected 64 lowercase hex digits")
            }
            return value
        }
        guard let deleteList = object["delete"]?.array else { throw fail("delete", "expected a JSON list") }
        var delete = [PackagePath]()
        for (index, item) in deleteList.enumerated() {
            guard let text = item.string else { throw fail("delete[\(index)]", "expected a string") }
            let path = PackagePath(text)
            if let problem = ArchivePath.validate(path.bytes) { throw fail("delete[\(index)]", "\"\(path)\": \(problem)") }
            if let previous = delete.last, !(previous < path) {
                throw fail("delete[\(index)]", "\"\(path)\" comes after \"\(previous)\": not sorted by path bytes, or twice")
            }
            delete.append(path)
        }
        guard let fileList = object["files"]?.array else { throw fail("files", "expected a JSON list") }
        let files = try FileIndex.decode(list: fileList, field: "files", archiveSize: archiveSize, fail: fail)
        return FileIndexDelta(from: try hash("from"), index: try hash("index"), delete: delete, files: files)
    }

    /// The new tree: `old` (the files of the tree the delta starts from) without `delete`, with `files`.
    /// Sorted by path; the entries not in `files` carry no range (offset and length 0). Throws when the
    /// delta deletes a path the tree does not hold.
    package func apply(to old: [PackagePath: TreeFile], source: String) throws -> [FileIndex.Entry] {
        var tree = old
        for (index, path) in delete.enumerated() where tree.removeValue(forKey: path) == nil {
            throw OfflinePkgError.invalidFileIndex(
                source: source, field: "delete[\(index)]", reason: "\"\(path)\" is not in the tree \(from)")
        }
        var ranged = [PackagePath: FileIndex.Entry]()
        for file in files {
            tree[file.path] = TreeFile(sha256: file.sha256, size: file.size)
            ranged[file.path] = file
        }
        return tree.keys.sorted().map { path in
            ranged[path] ?? FileIndex.Entry(path: path, sha256: tree[path]!.sha256, size: tree[path]!.size, offset: 0, length: 0)
        }
    }

    /// The delta as JSON, keys and entries in a fixed order: the same delta gives the same bytes.
    package func encode() -> [UInt8] {
        var out = Array("{\"from\":\"\(from)\",\"index\":\"\(index)\",\"delete\":[".utf8)
        for (position, path) in delete.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            FileIndex.appendString(path.bytes, to: &out)
        }
        out += Array("],\n\"files\":".utf8)
        out += FileIndex(entries: files).encode()
        out += Array("}\n".utf8)
        return out
    }
}
