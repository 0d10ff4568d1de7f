/// The tree hash of SPEC §4: sha256 over `<sha256>  <path>\n` for every regular file, sorted by the
/// bytes of the path — what `find | sort | xargs sha256sum | sha256sum` gives.
package enum TreeHash {
    package static func compute(_ files: [PackagePath: TreeFile]) -> String {
        let hasher = SHA256()
        for path in sortedPaths(files) {
            hasher.update(Array(files[path]!.sha256.utf8))
            hasher.update([0x20, 0x20])
            hasher.update(path.bytes)
            hasher.update([0x0a])
        }
        return hasher.finalize().hex
    }

    /// Paths in byte order, as `LC_ALL=C sort` gives them.
    package static func sortedPaths(_ files: [PackagePath: TreeFile]) -> [PackagePath] {
        files.keys.sorted()
    }
}

/// The `.index` file kept beside an installed tree: one `<sha256> <size> <path>` line per file. Lookups
/// build their table from it without walking the tree, and `verify` names damaged files with it.
package enum TreeIndexFile {
    package static func encode(_ files: [PackagePath: TreeFile]) -> [UInt8] {
        var out = [UInt8]()
        for path in TreeHash.sortedPaths(files) {
            let file = files[path]!
            out.append(contentsOf: "\(file.sha256) \(file.size) ".utf8)
            out.append(contentsOf: path.bytes)
            out.append(0x0a)
        }
        return out
    }

    package static func decode(_ bytes: [UInt8], path: String) throws -> [PackagePath: TreeFile] {
        var files = [PackagePath: TreeFile]()
        for line in bytes.split(separator: 0x0a) {
            let parts = line.split(separator: 0x20, maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, let size = Int64(String(decoding: parts[1], as: UTF8.self)) else {
                throw OfflinePkgError.corruptState(
                    path: path, reason: "malformed line \"\(String(decoding: line, as: UTF8.self))\"")
            }
            files[PackagePath(bytes: parts[2])] = TreeFile(
                sha256: String(decoding: parts[0], as: UTF8.self), size: size)
        }
        return files
    }
}
