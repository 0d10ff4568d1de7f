/// The tree hash of SPEC §4: sha256 over `<sha256>  <path>\n` for every regular file, sorted by the
/// bytes of the path — what `find | sort | xargs sha256sum | sha256sum` gives.
package enum TreeHash {
    package static func compute(_ files: [String: TreeFile]) -> String {
        let hasher = SHA256()
        for path in sortedPaths(files) {
            hasher.update(Array(files[path]!.sha256.utf8))
            hasher.update([0x20, 0x20])
            hasher.update(Array(path.utf8))
            hasher.update([0x0a])
        }
        return hasher.finalize().hex
    }

    /// Paths in byte order (Swift's String order is by Unicode scalars, not the bytes coreutils sorts).
    package static func sortedPaths(_ files: [String: TreeFile]) -> [String] {
        files.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }
}

/// The `.index` file kept beside an installed tree: one `<sha256> <size> <path>` line per file. Lookups
/// build their table from it without walking the tree, and `verify` names damaged files with it.
package enum TreeIndexFile {
    package static func encode(_ files: [String: TreeFile]) -> [UInt8] {
        var out = [UInt8]()
        for path in TreeHash.sortedPaths(files) {
            let file = files[path]!
            out.append(contentsOf: "\(file.sha256) \(file.size) \(path)\n".utf8)
        }
        return out
    }

    package static func decode(_ bytes: [UInt8], path: String) throws -> [String: TreeFile] {
        var files = [String: TreeFile]()
        for line in bytes.split(separator: 0x0a) {
            let parts = line.split(separator: 0x20, maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, let size = Int64(String(decoding: parts[1], as: UTF8.self)) else {
                throw OfflinePkgError.corruptState(
                    path: path, reason: "malformed line \"\(String(decoding: line, as: UTF8.self))\"")
            }
            files[String(decoding: parts[2], as: UTF8.self)] = TreeFile(
                sha256: String(decoding: parts[0], as: UTF8.self), size: size)
        }
        return files
    }
}
