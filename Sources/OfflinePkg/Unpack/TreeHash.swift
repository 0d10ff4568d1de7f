/// A tree's files in the byte order of their paths (what `LC_ALL=C sort` gives): sorted once, then
/// hashed, indexed and tabled from the same array (a 100k-file install sorted them three times, and
/// looked every path up again each time).
package struct SortedTree: Sendable {
    package let entries: [(path: PackagePath, file: TreeFile)]

    package init(_ files: [PackagePath: TreeFile]) {
        var entries = files.map { (path: $0.key, file: $0.value) }
        entries.sort { $0.path < $1.path }
        self.entries = entries
    }

    /// Entries already in path order (a part of another `SortedTree`).
    package init(sorted entries: [(path: PackagePath, file: TreeFile)]) {
        self.entries = entries
    }
}

/// The tree hash of docs/protocol.md#the-tree-hash: sha256 over `<sha256>  <path>\n` for every regular file, sorted by the
/// bytes of the path — what `find | sort | xargs sha256sum | sha256sum` gives.
package enum TreeHash {
    package static func compute(_ files: [PackagePath: TreeFile]) -> String {
        compute(SortedTree(files))
    }

    package static func compute(_ tree: SortedTree) -> String {
        let hasher = SHA256()
        // The lines go to the hasher 64 KiB at a time, not a call per piece.
        var lines = [UInt8]()
        lines.reserveCapacity(1 << 16 + 4096)
        for (path, file) in tree.entries {
            lines.append(contentsOf: file.sha256.utf8)
            lines.append(0x20)
            lines.append(0x20)
            lines.append(contentsOf: path.bytes)
            lines.append(0x0a)
            if lines.count >= 1 << 16 {
                lines.withUnsafeBytes { hasher.update($0) }
                lines.removeAll(keepingCapacity: true)
            }
        }
        lines.withUnsafeBytes { hasher.update($0) }
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
        encode(SortedTree(files))
    }

    package static func encode(_ tree: SortedTree) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(tree.entries.reduce(0) { $0 + 64 + 2 + 20 + $1.path.bytes.count })
        for (path, file) in tree.entries {
            out.append(contentsOf: file.sha256.utf8)
            out.append(0x20)
            out.append(contentsOf: String(file.size).utf8)
            out.append(0x20)
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
