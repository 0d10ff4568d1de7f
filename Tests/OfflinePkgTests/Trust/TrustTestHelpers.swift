import Foundation
import Testing

@testable import OfflinePkg

// Helpers private to the Trust tests. The names carry a `Trust` prefix so they never clash with the
// shared test-support module, which is being written separately.

/// A fresh directory under the system temp folder, removed when the value goes away.
final class TrustTempDir {
    let path: String

    init() throws {
        let template = NSTemporaryDirectory() + "/offlinepkg-trust-XXXXXX"
        var buffer = Array(template.utf8CString)
        guard let created = mkdtemp(&buffer) else {
            throw OfflinePkgError.io(path: template, operation: "mkdtemp", Errno.current)
        }
        path = String(cString: created)
    }

    deinit { try? FileSystem.removeTree(path) }

    func file(_ name: String) -> String { path + "/" + name }

    @discardableResult
    func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let destination = file(name)
        try FileSystem.writeAtomically(bytes, to: destination)
        return destination
    }

    func read(_ name: String) throws -> [UInt8] { try FileSystem.read(file(name)) }
}

/// The stock minisign tool, run as a child process.
enum TrustMinisignTool {
    struct Result {
        var status: Int32
        var output: String
    }

    static var executable: String {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
            let candidate = "\(directory)/minisign"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return "/usr/bin/minisign"
    }

    /// Runs minisign in `directory` with stdin at /dev/null, so that a password prompt fails at once
    /// instead of hanging; every key these tests make is unencrypted (`-W`).
    static func run(_ arguments: [String], in directory: TrustTempDir) throws -> Result {
        let outputPath = directory.file("minisign-output-\(UUID().uuidString)")
        try FileSystem.writeAtomically([], to: outputPath)
        defer { FileSystem.discardFile(outputPath) }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        defer { try? output.close() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory.path)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: try FileSystem.read(outputPath), as: UTF8.self)
        return Result(status: process.terminationStatus, output: text)
    }

    /// Runs minisign and records an issue with its output when it does not exit 0.
    @discardableResult
    static func succeed(_ arguments: [String], in directory: TrustTempDir, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> String
    {
        let result = try run(arguments, in: directory)
        #expect(
            result.status == 0, "minisign \(arguments.joined(separator: " ")) failed: \(result.output)",
            sourceLocation: sourceLocation)
        return result.output
    }

    /// `minisign -G -W`: a stock key pair without a password, as `<name>.pub` and `<name>.key`.
    static func generateKeyPair(_ name: String, in directory: TrustTempDir) throws {
        try succeed(["-G", "-W", "-p", "\(name).pub", "-s", "\(name).key"], in: directory)
    }
}

/// The reason of a `.signatureRefused` error, or nil for any other outcome.
func trustRefusalReason(source: String = "test-source", _ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch OfflinePkgError.signatureRefused(let errorSource, let reason) {
        #expect(errorSource == source)
        return reason
    } catch {
        Issue.record("expected a signature refusal, got \(error)")
        return nil
    }
}

/// The message of an `.invalidArgument` error, or nil for any other outcome.
func trustInvalidArgumentMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch OfflinePkgError.invalidArgument(let message) {
        return message
    } catch {
        Issue.record("expected an invalid argument error, got \(error)")
        return nil
    }
}
