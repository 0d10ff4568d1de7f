import Dispatch
import FoundationEssentials
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// The `offlinepkg` command line: finds the command, parses its table, runs it, and is the one place
/// where an error becomes an exit status (docs/protocol.md#exit-statuses).
package enum OfflinePkgCommand {
    /// Exit statuses of docs/protocol.md#exit-statuses.
    package enum ExitStatus {
        package static let success: Int32 = 0
        package static let failure: Int32 = 1
        package static let usage: Int32 = 2
        package static let locked: Int32 = 3
        package static let refused: Int32 = 4
    }

    static let commands: [CommandSpec] = [
        SyncCommand.spec, StatusCommand.spec, LookupCommand.spec, VerifyCommand.spec, GCCommand.spec,
        RollbackCommand.spec, ServeCommand.spec, PublishCommand.spec, KeygenCommand.spec, HistoryCommand.spec,
        PromoteCommand.spec, RemoveCommand.spec, ReportsCommand.serve, ReportsCommand.importing, ReportsCommand.show,
        TrustCommand.spec, KeysCommands.initSpec, KeysCommands.rotateSpec, KeysCommands.showSpec,
    ]

    /// Commands named by two words (`reports serve`): the group's first word.
    static let groups: Set<String> = ["reports", "keys"]

    /// Runs the command line `arguments` (without the program name) and returns the exit status.
    package static func main(_ arguments: [String]) async -> Int32 {
        await run(arguments, context: .live())
    }

    /// `main` for the entry point: runs it on the concurrency pool and waits on the calling thread for its
    /// status. An `async` top-level `main` ends the main thread in `dispatch_main`, whose `pthread_exit`
    /// unwinds that thread's stack: libgcc's unwinder reads the binary's unwind tables, 0.8 MiB of pages
    /// that every command mapped for that alone (docs/design.md, "Memory").
    package static func mainWaiting(_ arguments: [String]) -> Int32 {
        // Written before `finished` is signalled, read after the wait: the semaphore orders the two.
        final class Outcome: @unchecked Sendable { var status = ExitStatus.failure }
        let outcome = Outcome()
        let finished = DispatchSemaphore(value: 0)
        Task.detached {
            outcome.status = await main(arguments)
            finished.signal()
        }
        finished.wait()
        return outcome.status
    }

    /// What the process that runs `arguments` sets for itself before anything else: a sync's threads
    /// (reader, writer lanes, transfers) share one malloc arena. They hand buffers to one another a few
    /// hundred KiB at a time, so one arena costs them no time, and each arena of its own held the pages
    /// its frees left; blocks larger than those go back when freed; and the pages of code and read-only
    /// data start-up read leave the resident set before the first unpack (docs/design.md, "Memory"). The
    /// servers and the publisher, whose threads allocate side by side all the time, keep glibc's arenas.
    /// The entry point calls it; tests and hosts never.
    package static func prepareProcess(for arguments: [String]) {
        if arguments.first == "sync" {
            MallocArenas.limit(to: 1)
            // Past a lane's 256 KiB pieces, which come and go all through an unpack and stay on the heap.
            MallocArenas.fixThresholds(mmapAbove: 260 << 10, trimAbove: 512 << 10)
            // libcurl brings GnuTLS in (through libldap and librtmp), whose constructor initialises it
            // as it loads (priorities, PKCS #11) for a process that never calls it: curl speaks TLS
            // through OpenSSL here. A caller that does use GnuTLS (LDAP) initialises it explicitly.
            setenv("GNUTLS_NO_IMPLICIT_INIT", "1", 0)
            // Start-up's code and read-only data, read once, out of the resident set before the unpacks.
            StartupPages.shared.dropBeforeNextUnpack()
        }
        // A parent may hand its blocked signals down (a test runner's worker thread, some supervisors):
        // SIGINT and SIGTERM end or interrupt every command, so the main thread, and each thread made
        // after it, takes them.
        var ending = sigset_t()
        sigemptyset(&ending)
        sigaddset(&ending, SIGINT)
        sigaddset(&ending, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &ending, nil)
    }

    package static func run(_ arguments: [String], context: CLIContext) async -> Int32 {
        guard let first = arguments.first, !["-h", "--help", "help"].contains(first) else {
            context.output.print(overview)
            return arguments.isEmpty ? ExitStatus.usage : ExitStatus.success
        }
        if first == "--version" {
            context.output.print("offlinepkg \(OfflinePkgVersion.current)")
            return ExitStatus.success
        }
        var name = first
        var words = 1
        if groups.contains(name) {
            guard arguments.count > 1, !arguments[1].hasPrefix("-") else {
                let members = commands.filter { $0.name.hasPrefix(name + " ") }.map(\.name)
                context.output.error("offlinepkg: \(name) needs one of: \(members.joined(separator: ", "))\n\n\(overview)")
                return ExitStatus.usage
            }
            name += " " + arguments[1]
            words = 2
        }
        guard let command = commands.first(where: { $0.name == name }) else {
            context.output.error("offlinepkg: unknown command \"\(name)\"\n\n\(overview)")
            return ExitStatus.usage
        }
        let rest = Array(arguments.dropFirst(words))
        if rest.contains("--help") || rest.contains("-h") {
            context.output.print(command.help)
            return ExitStatus.success
        }
        let (message, exitStatus): (String, Int32)
        do {
            let parsed = try command.parse(rest)
            return try await command.run(parsed, context)
        } catch let error as UsageError {
            (message, exitStatus) = ("\(error)\nusage: \(command.usage)", ExitStatus.usage)
        } catch let error as OfflinePkgError {
            (message, exitStatus) = ("\(error)" + hint(for: error, in: command), status(for: error))
        } catch {
            (message, exitStatus) = ("\(error)", ExitStatus.failure)
        }
        context.output.error("offlinepkg \(command.name): \(message)")
        // `--json` promises one JSON object on stdout, failures included, so a script never parses nothing.
        if rest.contains("--json") {
            context.output.json(
                JSONFailure(error: message.split(separator: "\n").first.map(String.init) ?? message, exitStatus: exitStatus))
        }
        return exitStatus
    }

    /// What `--json` prints when a command fails.
    struct JSONFailure: Encodable {
        var error: String
        var exitStatus: Int32
    }

    /// The way out a message may offer: `--wait` only where the command accepts it; another root where
    /// this one cannot be written.
    static func hint(for error: OfflinePkgError, in command: CommandSpec) -> String {
        switch error {
        case .locked where command.options.contains(where: { $0.name == CommandSpec.Option.wait.name }):
            return " (use --wait to wait for it)"
        case .rootNotWritable:
            return "; give a root this user can write with --root DIR or OFFLINEPKG_ROOT=DIR"
        default:
            return ""
        }
    }

    static func status(for error: OfflinePkgError) -> Int32 {
        switch error.category {
        case .failure: ExitStatus.failure
        case .refused: ExitStatus.refused
        case .locked: ExitStatus.locked
        case .usage: ExitStatus.usage
        }
    }

    static var overview: String {
        var lines = ["usage: offlinepkg <command> [options]", "", "commands:"]
        for command in commands {
            lines.append("  " + CommandSpec.padded(command.name, to: 15) + command.summary)
        }
        lines.append("")
        lines.append("`offlinepkg <command> --help` shows a command's options.")
        return lines.joined(separator: "\n")
    }
}
