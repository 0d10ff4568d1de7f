import Foundation

/// A fresh folder under the system temp dir, removed when the value is released. Tests and benchmarks
/// work on real directories, never mocks of the file system.
public final class TemporaryDirectory: @unchecked Sendable {
    // Immutable after init; `@unchecked` only because deinit removes the folder.
    public let path: String

    public init(prefix: String = "offlinepkg-test") throws {
        var template = Array((NSTemporaryDirectory() + "/\(prefix).XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw CocoaError(.fileWriteUnknown)
        }
        path = String(cString: made)
    }

    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    public func sub(_ name: String) -> String { path + "/" + name }

    deinit {
        // Installed trees are read-only: make folders writable before removing them.
        _ = try? Process.run(URL(fileURLWithPath: "/bin/chmod"), arguments: ["-R", "u+w", path]).waitUntilExit()
        try? FileManager.default.removeItem(atPath: path)
    }
}
