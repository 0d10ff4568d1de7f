import Foundation
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// What a command needs from the outside world (the environment, how to write), passed in rather than
/// reached for, so a test can run a command in process with its own environment. `Output` always
/// writes to the process's stdout and stderr, so a test that reads a command's output runs the binary.
struct CLIContext: Sendable {
    var environment: [String: String]
    var output: Output

    static func live() -> CLIContext {
        let environment = ProcessInfo.processInfo.environment
        return CLIContext(
            environment: environment,
            output: Output(stderrIsTerminal: isatty(2) == 1, journal: Output.stderrIsJournal(environment["JOURNAL_STREAM"])))
    }

    /// The cache root: `--root`, else the defaults of man/offlinepkg.1 (FILES).
    func root(_ arguments: ParsedArguments) -> String {
        arguments.value("root") ?? CacheLayout.defaultRoot(environment: environment)
    }

    /// The cache root opened for a one-shot command: no watcher thread, since the process ends soon.
    func openStore(_ arguments: ParsedArguments) throws -> PackageStore {
        try PackageStore(root: URL(fileURLWithPath: existingRoot(arguments)), options: .init(watchInterval: 0))
    }

    /// The cache root opened for writing (`gc`, `rollback`, `verify`): no lookup index, no reader lease.
    func openRoot(_ arguments: ParsedArguments) throws -> CacheRoot {
        try CacheRoot(root: URL(fileURLWithPath: existingRoot(arguments)))
    }

    /// The cache root for every command but `sync`, which alone may create one (man/offlinepkg.1): a mistyped
    /// `--root` must fail, not answer from a new, empty root.
    func existingRoot(_ arguments: ParsedArguments) throws -> String {
        let root = root(arguments)
        var info = stat()
        guard stat(root, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw OfflinePkgError.unavailable("no cache root at \(root)")
        }
        return root
    }
}

/// Where a command writes: results on stdout, progress and errors on stderr.
struct Output: Sendable {
    var stderrIsTerminal: Bool
    /// stderr is systemd's journal stream: each line starts with its sd-daemon priority (`<3>` ...).
    var journal = false

    /// sd-daemon(3) priorities for the journal.
    enum Priority: Int {
        case error = 3
        case warning = 4
        case info = 6
    }

    func print(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    func error(_ text: String) { log(text, .error) }
    func warning(_ text: String) { log(text, .warning) }
    func info(_ text: String) { log(text, .info) }

    /// One message on stderr; in the journal every line of it carries the priority, since journald
    /// reads each line as an entry of its own.
    func log(_ text: String, _ priority: Priority) {
        let lines =
            journal
            ? text.split(separator: "\n", omittingEmptySubsequences: false).map { "<\(priority.rawValue)>\($0)" }
                .joined(separator: "\n") : text
        FileHandle.standardError.write(Data((lines + "\n").utf8))
    }

    /// Whether `JOURNAL_STREAM` (`<device>:<inode>`, set by systemd for a unit's output) names the file
    /// that fd 2 is: a child whose stderr was redirected elsewhere must not prefix its lines.
    static func stderrIsJournal(_ value: String?) -> Bool {
        guard let value, !value.isEmpty else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return value == "\(info.st_dev):\(info.st_ino)"
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
