#if canImport(Glibc)
import Glibc
#endif

/// Walks a folder and reports every regular file by its path relative to the folder, as the bytes the
/// file system holds (a name that is not UTF-8 is reported as it is, never as a replacement character).
package enum TreeWalker {
    package static func regularFiles(in root: String, _ body: (PackagePath) -> Void) {
        walk(Array(root.utf8), relative: [], body)
    }

    private static func walk(_ path: [UInt8], relative: [UInt8], _ body: (PackagePath) -> Void) {
        for name in FileSystem.entryNames(ofBytes: path) {
            let child = path + [UInt8(ascii: "/")] + name
            let childRelative = relative.isEmpty ? name : relative + [UInt8(ascii: "/")] + name
            var info = stat()
            guard FileSystem.withCPath(child, { lstat($0, &info) }) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: walk(child, relative: childRelative, body)
            case S_IFREG: body(PackagePath(bytes: childRelative))
            default: continue
            }
        }
    }
}

/// Streams a file through SHA-256.
package enum FileHasher {
    package static func sha256(ofFile path: String) throws -> String {
        let fd = try FileDescriptor.open(path, O_RDONLY)
        return try fd.closeAfter { fd in
            let hasher = SHA256()
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            while true {
                let count = try buffer.withUnsafeMutableBytes { try fd.read(into: $0, path: path) }
                if count == 0 { break }
                buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            }
            return hasher.finalize().hex
        }
    }
}
