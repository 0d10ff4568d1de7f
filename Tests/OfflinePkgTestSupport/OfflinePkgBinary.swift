import Foundation

/// The built `offlinepkg` executable, for tests that need a real process (kill -9, locks, exit codes).
/// SwiftPM puts it beside the test bundle; `make test` builds it before the tests run.
public enum OfflinePkgBinary {
    public static var path: String {
        let bundleFolder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for folder in [bundleFolder, bundleFolder.deletingLastPathComponent()] {
            let candidate = folder.appendingPathComponent("offlinepkg").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return Fixtures.root.deletingLastPathComponent().appendingPathComponent(".build/debug/offlinepkg").path
    }

    /// Runs `offlinepkg` with `arguments`.
    public static func run(_ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60) throws
        -> ProcessResult
    {
        try OfflinePkgTestSupport.run(path, arguments, environment: environment, timeout: timeout)
    }
}
