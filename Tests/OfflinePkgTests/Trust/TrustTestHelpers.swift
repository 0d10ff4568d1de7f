import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

// Helpers private to the Trust tests (the temporary folders and the process runner are the shared
// test support's).

/// The stock minisign tool, run as a child process.
enum TrustMinisignTool {
    struct Result {
        var status: Int32
        var output: String
    }

    static var executable: String { which("minisign") ?? "/usr/bin/minisign" }

    /// Runs minisign in `directory` with stdin at /dev/null, so that a password prompt fails at once
    /// instead of hanging; every key these tests make is unencrypted (`-W`). `output` is its stdout
    /// followed by its stderr.
    static func run(_ arguments: [String], in directory: TemporaryDirectory) throws -> Result {
        let result = try OfflinePkgTestSupport.run(executable, arguments, currentDirectory: directory.path, timeout: 30)
        return Result(status: result.status, output: result.stdout + result.stderr)
    }

    /// Runs minisign and records an issue with its output when it does not exit 0.
    @discardableResult
    static func succeed(_ arguments: [String], in directory: TemporaryDirectory, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> String
    {
        let result = try run(arguments, in: directory)
        #expect(
            result.status == 0, "minisign \(arguments.joined(separator: " ")) failed: \(result.output)",
            sourceLocation: sourceLocation)
        return result.output
    }

    /// `minisign -G -W`: a stock key pair without a password, as `<name>.pub` and `<name>.key`.
    static func generateKeyPair(_ name: String, in directory: TemporaryDirectory) throws {
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
