import Foundation

/// The repository's committed test inputs, in its top-level `Fixtures/` folder (see its README for
/// how each was made). Tests never use them in place: `copy` gives each test its own copy.
public enum Fixtures {
    /// `Fixtures/` at the top of the repository, found from this source file's location as SwiftPM
    /// does: this file lives at `Tests/OfflinePkgTestSupport/Fixtures.swift`.
    public static var root: URL {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // OfflinePkgTestSupport
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // repository root
            .appendingPathComponent("Fixtures", isDirectory: true)
    }

    /// The committed fixture `name` (a path relative to `Fixtures/`), for reading only.
    public static func url(_ name: String) -> URL {
        root.appendingPathComponent(name)
    }

    /// Copies the fixture `name` (a file or a folder) into `directory`, under its last path
    /// component, and returns the path of the copy.
    @discardableResult
    public static func copy(_ name: String, to directory: String) throws -> String {
        let source = url(name)
        guard FileManager.default.fileExists(atPath: source.path) else {
            throw TestSupportError("no fixture \(name) in \(root.path)")
        }
        let destination = directory + "/" + source.lastPathComponent
        try FileManager.default.copyItem(atPath: source.path, toPath: destination)
        return destination
    }
}
