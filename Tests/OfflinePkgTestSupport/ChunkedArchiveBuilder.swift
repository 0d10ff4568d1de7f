import Foundation
import OfflinePkg

/// A chunked `tar.zst` and its file index (docs/protocol.md#chunked-archives-and-file-indexes) made the way another tool would: ustar members
/// written here, each compressed by the stock `zstd` into its own frame, the frames concatenated, the
/// end-of-archive blocks one last frame; the index JSON compressed by `zstd` and named by its sha256.
/// The archive stays a plain tar.zst (`bsdtar -xf` reads it).
public enum ChunkedArchiveBuilder {
    public struct Member: Sendable, Equatable {
        public var path: String
        public var sha256: String
        public var size: Int
        public var offset: Int
        public var length: Int
    }

    public struct Built {
        /// Relative to the repository: `archives/<id>-<version>.tar.zst`, `files/<sha256>.json.zst`.
        public var archiveURL: String
        public var indexURL: String
        public var members: [Member]
        /// The manifest entry, `archive.files` included.
        public var entry: [String: Any]
    }

    /// Writes `files` into `site` (replacing it), the archive and index into `repo`, and returns them.
    public static func build(
        id: String, version: String, routes: [String], files: [String: [UInt8]], site: String, repo: String, level: Int = 3
    ) throws -> Built {
        try? FileManager.default.removeItem(atPath: site)
        try writeSite(files, to: site)
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-chunked")
        let paths = files.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var names = [String]()
        for (index, path) in paths.enumerated() {
            let name = String(format: "m%06d", index)
            try Data(member(path: path, bytes: files[path]!)).write(to: URL(fileURLWithPath: scratch.path(name)))
            names.append(name)
        }
        try Data(count: 1024).write(to: URL(fileURLWithPath: scratch.path("end")))
        names.append("end")
        // One zstd run, one frame file per member.
        try run("/usr/bin/zstd", ["-q", "-f", "-\(level)"] + names, currentDirectory: scratch.path).checked("zstd")

        var archive = Data()
        var members = [Member]()
        for (index, name) in names.enumerated() {
            let frame = try Data(contentsOf: URL(fileURLWithPath: scratch.path(name + ".zst")))
            if index < paths.count {
                let bytes = files[paths[index]]!
                members.append(
                    Member(
                        path: paths[index], sha256: SHA256.hash(bytes).hex, size: bytes.count, offset: archive.count,
                        length: frame.count))
            }
            archive.append(frame)
        }
        try FileManager.default.createDirectory(atPath: repo + "/archives", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: repo + "/files", withIntermediateDirectories: true)
        let archiveURL = "archives/\(id)-\(version).tar.zst"
        try archive.write(to: URL(fileURLWithPath: repo + "/" + archiveURL))

        let json = "[" + members.map { member in
            "{\"path\":\(jsonString(member.path)),\"sha256\":\"\(member.sha256)\",\"size\":\(member.size),"
                + "\"offset\":\(member.offset),\"length\":\(member.length)}"
        }.joined(separator: ",\n") + "]\n"
        try Data(json.utf8).write(to: URL(fileURLWithPath: scratch.path("index.json")))
        try run("zstd", ["-q", "-f", "-19", scratch.path("index.json"), "-o", scratch.path("index.json.zst")]).checked("zstd index")
        let compressed = try [UInt8](Data(contentsOf: URL(fileURLWithPath: scratch.path("index.json.zst"))))
        let indexURL = "files/\(SHA256.hash(compressed).hex).json.zst"
        try Data(compressed).write(to: URL(fileURLWithPath: repo + "/" + indexURL))

        var entry = try makeManifestEntry(
            id: id, version: version, routes: routes, archivePath: repo + "/" + archiveURL, archiveURL: archiveURL,
            tree: try treeHash(of: site))
        var archiveObject = entry["archive"] as! [String: Any]
        archiveObject["files"] = ["url": indexURL, "sha256": SHA256.hash(compressed).hex, "size": compressed.count]
        entry["archive"] = archiveObject
        return Built(archiveURL: archiveURL, indexURL: indexURL, members: members, entry: entry)
    }

    /// Writes the file-index delta (`FileIndexDelta`) from `old`'s tree to `new`'s index into `repo`, as
    /// `publish` names it, compressed by the stock `zstd`; `edit` may spoil it first. Returns its URL.
    @discardableResult
    package static func writeIndexDelta(
        from old: Built, to new: Built, repo: String, edit: (inout FileIndexDelta) -> Void = { _ in }
    ) throws -> String {
        var oldFiles = [PackagePath: TreeFile]()
        for member in old.members { oldFiles[PackagePath(member.path)] = TreeFile(sha256: member.sha256, size: Int64(member.size)) }
        let entries = new.members.map {
            FileIndex.Entry(
                path: PackagePath($0.path), sha256: $0.sha256, size: Int64($0.size), offset: Int64($0.offset), length: Int64($0.length))
        }
        let index = String(new.indexURL.dropFirst("files/".count).prefix(64))
        var delta = FileIndexDelta(from: old.entry["tree"] as! String, old: oldFiles, new: entries, index: index)
        edit(&delta)
        let url = FileIndexDelta.url(nextTo: new.indexURL, fromTree: old.entry["tree"] as! String, index: index)
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-index-delta")
        try Data(delta.encode()).write(to: URL(fileURLWithPath: scratch.path("delta.json")))
        try FileManager.default.createDirectory(atPath: repo + "/files/deltas", withIntermediateDirectories: true)
        try run("zstd", ["-q", "-f", "-19", scratch.path("delta.json"), "-o", repo + "/" + url]).checked("zstd delta")
        return url
    }

    /// One ustar member: its header block, the data, padding to a 512-byte block; no end blocks.
    public static func member(path: String, bytes: [UInt8]) throws -> [UInt8] {
        let name = Array(path.utf8)
        guard name.count <= 100 else { throw TestSupportError("chunked builder: path longer than 100 bytes: \(path)") }
        var header = [UInt8](repeating: 0, count: 512)
        func put(_ text: String, at offset: Int) { for (i, byte) in text.utf8.enumerated() { header[offset + i] = byte } }
        func octal(_ value: Int, width: Int) -> String {
            let digits = String(value, radix: 8)
            return String(repeating: "0", count: max(0, width - 1 - digits.count)) + digits
        }
        for (i, byte) in name.enumerated() { header[i] = byte }
        put(octal(0o644, width: 8), at: 100)
        put(octal(0, width: 8), at: 108)
        put(octal(0, width: 8), at: 116)
        put(octal(bytes.count, width: 12), at: 124)
        put(octal(1_700_000_000, width: 12), at: 136)
        put("        ", at: 148)
        header[156] = UInt8(ascii: "0")
        put("ustar", at: 257)
        put("00", at: 263)
        let sum = header.reduce(0) { $0 + Int($1) }
        put(octal(sum, width: 7), at: 148)
        header[154] = 0
        header[155] = UInt8(ascii: " ")
        let padding = (512 - bytes.count % 512) % 512
        return header + bytes + [UInt8](repeating: 0, count: padding)
    }

    static func jsonString(_ text: String) -> String {
        let data = try! JSONSerialization.data(withJSONObject: [text], options: [.withoutEscapingSlashes])
        let array = String(decoding: data, as: UTF8.self)
        return String(array.dropFirst().dropLast())
    }
}
