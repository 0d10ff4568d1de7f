import FoundationEssentials
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// What a command needs from the outside world, passed in rather than reached for: the environment,
/// where it writes, and the clock and network (`World`). `live()` is the process's; a test runs a
/// command in process with its own (`OfflinePkgCommand.run(_:context:)`), reading what it wrote.
package struct CLIContext: Sendable {
    package var environment: [String: String]
    package var output: Output
    package var world: World

    package init(environment: [String: String], output: Output, world: World = .live) {
        self.environment = environment
        self.output = output
        self.world = world
    }

    static func live() -> CLIContext {
        let environment = processEnvironment()
        return CLIContext(
            environment: environment,
            output: Output(
                sink: .process, stderrIsTerminal: isatty(2) == 1, journal: Output.stderrIsJournal(environment["JOURNAL_STREAM"])))
    }

    /// The process's environment, as `ProcessInfo.environment` gives it: `NAME=value` entries split at
    /// the first `=`, those without one or not UTF-8 left out, a later entry of a name winning. Read
    /// here by bytes: `ProcessInfo` splits each entry by `Character`, a tenth of a no-op sync's own work.
    static func processEnvironment() -> [String: String] {
        var environment = [String: String]()
        var entry = environ
        while let pointer = entry.pointee {
            entry += 1
            let length = strlen(pointer)
            guard let equals = memchr(pointer, Int32(UInt8(ascii: "=")), length) else { continue }
            let nameLength = pointer.distance(to: equals.assumingMemoryBound(to: CChar.self))
            let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
            guard let name = String(validating: bytes[..<nameLength], as: UTF8.self),
                let value = String(validating: bytes[(nameLength + 1)...], as: UTF8.self)
            else { continue }
            environment[name] = value
        }
        return environment
    }

    /// The cache root's path: `--root`, else the defaults of man/offlinepkg.1 (FILES).
    func rootPath(_ arguments: ParsedArguments) -> String {
        arguments.value("root") ?? CacheLayout.defaultRoot(environment: environment)
    }

    /// The cache root opened for a one-shot command: no watcher thread, since the process ends soon.
    func openStore(_ arguments: ParsedArguments) throws -> PackageStore {
        try PackageStore(root: URL(fileURLWithPath: existingRoot(arguments)), options: .init(watchInterval: 0))
    }

    /// The cache root opened for writing (`gc`, `rollback`, `verify`): no lookup index, no reader lease.
    func openRoot(_ arguments: ParsedArguments) throws -> CacheRoot {
        try CacheRoot(creating: existingRoot(arguments), world: world)
    }

    /// The cache root for every command but `sync`, which alone may create one (man/offlinepkg.1): a mistyped
    /// `--root` must fail, not answer from a new, empty root.
    func existingRoot(_ arguments: ParsedArguments) throws -> String {
        let root = rootPath(arguments)
        var info = stat()
        guard stat(root, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw OfflinePkgError.unavailable("no cache root at \(root)")
        }
        return root
    }
}

/// Where a command writes: results on stdout, progress and errors on stderr.
package struct Output: Sendable {
    var sink: OutputSink
    var stderrIsTerminal: Bool
    /// stderr is systemd's journal stream: each line starts with its sd-daemon priority (`<3>` ...).
    var journal = false

    package init(sink: OutputSink, stderrIsTerminal: Bool = false, journal: Bool = false) {
        self.sink = sink
        self.stderrIsTerminal = stderrIsTerminal
        self.journal = journal
    }

    /// sd-daemon(3) priorities for the journal.
    enum Priority: Int {
        case error = 3
        case warning = 4
        case info = 6
    }

    func print(_ text: String) {
        sink.standardOutput(text + "\n")
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
        sink.standardError(lines + "\n")
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

/// The two streams a command writes to: the process's stdout and stderr, or a test's buffers.
package struct OutputSink: Sendable {
    package var standardOutput: @Sendable (String) -> Void
    package var standardError: @Sendable (String) -> Void

    package init(standardOutput: @escaping @Sendable (String) -> Void, standardError: @escaping @Sendable (String) -> Void) {
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    /// The process's own stdout and stderr.
    static let process = OutputSink(standardOutput: { write($0, to: 1) }, standardError: { write($0, to: 2) })

    /// Writes all of `text` to stdout (1) or stderr (2); a closed pipe or full disk drops the rest, as
    /// there is nowhere left to report it.
    private static func write(_ text: String, to descriptor: Int32) {
        try? FileDescriptor(rawValue: descriptor).writeAll(Array(text.utf8), path: descriptor == 1 ? "stdout" : "stderr")
    }
}
