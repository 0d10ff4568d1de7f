#if canImport(Glibc)
import Glibc
#endif

/// Walks a folder and reports every regular file by its path relative to the folder.
package enum TreeWalker {
    package static func regularFiles(in root: String, _ body: (String) -> Void) {
        walk(root, relative: "", body)
    }

    private static func walk(_ path: String, relative: String, _ body: (String) -> Void) {
        for name in FileSystem.contents(of: path) {
            let child = path + "/" + name
            let childRelative = relative.isEmpty ? name : relative + "/" + name
            var info = stat()
            guard lstat(child, &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: walk(child, relative: childRelative, body)
            case S_IFREG: body(childRelative)
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
