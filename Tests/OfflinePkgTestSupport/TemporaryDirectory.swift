import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under `/tmp` (or another folder), removed with everything in it when the value goes away.
///
/// Installed package trees are read-only (0500 folders, 0400 files), so removal first makes every
/// folder writable again: without that, a non-root test run could not delete what it installed.
public final class TemporaryDirectory: Sendable {
    /// The absolute path of the directory.
    public let path: String

    /// The directory as a file URL.
    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    /// Creates a uniquely named directory, `<base>/<prefix>.XXXXXX`, with mode 0700.
    public init(prefix: String = "offlinepkg-test", in base: String = "/tmp") throws {
        var template = Array("\(base)/\(prefix).XXXXXX".utf8CString)
        let created = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard created != nil else {
            throw TestSupportError("mkdtemp for \(base)/\(prefix).XXXXXX failed: \(String(cString: strerror(errno)))")
        }
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    deinit { remove() }

    /// The absolute path of `relativePath` inside this directory.
    public func path(_ relativePath: String) -> String {
        relativePath.isEmpty ? path : path + "/" + relativePath
    }

    /// Writes `text` as UTF-8 to `relativePath`, creating parent folders; returns the absolute path.
    @discardableResult
    public func write(_ text: String, to relativePath: String) throws -> String {
        try write(Array(text.utf8), to: relativePath)
    }

    /// Writes `bytes` to `relativePath`, creating parent folders; returns the absolute path.
    @discardableResult
    public func write(_ bytes: [UInt8], to relativePath: String) throws -> String {
        let target = path(relativePath)
        try writeFile(bytes, to: target)
        return target
    }

    /// The bytes of the file `relativePath`.
    public func read(_ relativePath: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: path(relativePath))))
    }

    /// Creates the folder `relativePath` (and its parents); returns the absolute path.
    @discardableResult
    public func makeDirectory(_ relativePath: String) throws -> String {
        let target = path(relativePath)
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        return target
    }

    /// Deletes the directory and its contents. Safe to call more than once.
    public func remove() {
        Self.makeWritable(path)
        try? FileManager.default.removeItem(atPath: path)
    }

    // Walks folders top-down, opening each one before listing it, so that a 0555 (or 0000) folder
    // never stops the walk. Symbolic links are not followed: chmod would change their targets.
    private static func makeWritable(_ directory: String) {
        var info = stat()
        guard lstat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else { return }
        chmod(directory, 0o700)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            makeWritable(directory + "/" + name)
        }
    }
}

/// A failure of the test-support helpers themselves (a tool that would not start, a server that
/// never came up), with a message saying what and where.
public struct TestSupportError: Error, CustomStringConvertible, Sendable {
    public let description: String

    public init(_ description: String) { self.description = description }
}
