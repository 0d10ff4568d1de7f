import Foundation
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// What a command needs from the outside world, passed in rather than reached for, so tests can run
/// commands in process with their own environment and capture their output.
struct CLIContext: Sendable {
    var environment: [String: String]
    var output: Output

    static func live() -> CLIContext {
        CLIContext(environment: ProcessInfo.processInfo.environment, output: Output(stderrIsTerminal: isatty(2) == 1))
    }

    /// The cache root: `--root`, else the defaults of SPEC §6.
    func root(_ arguments: ParsedArguments) -> String {
        arguments.value("root") ?? CacheLayout.defaultRoot(environment: environment)
    }

    /// The cache root opened for a one-shot command: no watcher thread, since the process ends soon.
    func openStore(_ arguments: ParsedArguments) throws -> PackageStore {
        try PackageStore(root: URL(fileURLWithPath: root(arguments)), options: .init(watchInterval: 0))
    }
}

/// Where a command writes: results on stdout, progress and errors on stderr.
struct Output: Sendable {
    var stderrIsTerminal: Bool

    func print(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// Prints `value` as one JSON object on stdout.
    func json(_ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        // Encoding the CLI's own plain structs cannot fail.
        print(String(decoding: try! encoder.encode(value), as: UTF8.self))
    }
}
