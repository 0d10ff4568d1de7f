import FoundationEssentials
import OfflinePkg
import OfflinePkgReports

#if canImport(Glibc)
import Glibc
#endif

/// `reports serve`, `reports import`, `reports show`: the publisher's side of install reports (docs/protocol.md#install-reports).
enum ReportsCommand {
    static let database = CommandSpec.Option(name: "db", value: "FILE", help: "the reports database (SQLite); required")

    static let serve = CommandSpec(
        name: "reports serve", arguments: [],
        options: [
            database,
            .init(
                name: "host", value: "ADDR",
                help: "address to listen on, IPv4 or IPv6 (default 127.0.0.1: put a TLS proxy in front)"),
            .init(name: "port", value: "N", help: "port to listen on; 0 picks a free one (default 0)"),
        ],
        summary:
            "collect devices' install reports (POSTed JSON arrays) into the database; prints the URL, runs until SIGINT/SIGTERM",
        run: runServe)

    static let importing = CommandSpec(
        name: "reports import", arguments: ["<jsonl>..."], options: [database, .json, .quiet],
        summary: "store install reports from JSON-lines files (a log pipeline's output; - for stdin), each once",
        run: runImport)

    static let show = CommandSpec(
        name: "reports show", arguments: [],
        options: [
            database,
            .init(name: "days", value: "N", help: "count events of the last N days (default 30); devices now count all"),
            .json,
            .init(name: "html", value: "OUT", help: "also write a standalone HTML page with charts to OUT"),
        ],
        summary: "per package and version: devices now, adoption, failures, reverts, errors, bytes by way",
        run: runShow)

    static func path(_ arguments: ParsedArguments, _ command: String) throws -> String {
        guard let path = arguments.value("db") else { throw UsageError("\(command) needs --db FILE") }
        return path
    }

    static func runServe(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let file = try path(arguments, "reports serve")
        let port = try arguments.integer("port", in: 0...65535) ?? 0
        let host = arguments.value("host") ?? "127.0.0.1"
        signal(SIGPIPE, SIG_IGN)
        let collector: ReportsCollector
        do {
            collector = try ReportsCollector(
                database: try ReportsDatabase(path: file, clock: context.world.clock), host: host, port: UInt16(port))
        } catch OfflinePkgError.invalidArgument(let reason) {
            throw UsageError(reason)
        }
        let termination = try TerminationSignals()
        try collector.start()
        context.output.print(collector.url.absoluteString)
        await termination.wait()
        collector.stop()
        return OfflinePkgCommand.ExitStatus.success
    }

    static func runImport(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let file = try path(arguments, "reports import")
        let result = try ReportsImport.run(arguments.positionals, into: try ReportsDatabase(path: file, clock: context.world.clock))
        for problem in result.problems { context.output.warning("refused \(problem)") }
        if result.refused > result.problems.count {
            context.output.warning("... and \(result.refused - result.problems.count) more refused line(s)")
        }
        if arguments.flag("json") {
            context.output.json(result)
        } else if !arguments.flag("quiet") {
            context.output.print(
                "imported \(result.events) event(s) from \(result.lines) line(s) of \(result.files) file(s): "
                    + "\(result.stored) new, \(result.duplicates) already stored, \(result.refused) line(s) refused")
        }
        // Refused lines are refused input (docs/protocol.md#exit-statuses, 4); the others are stored all the same.
        return result.refused > 0 ? OfflinePkgCommand.ExitStatus.refused : OfflinePkgCommand.ExitStatus.success
    }

    static func runShow(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let file = try path(arguments, "reports show")
        let days = try arguments.integer("days", in: 1...36_500) ?? 30
        let summary = try FleetSummary.make(
            try ReportsDatabase(path: file, readOnly: true, clock: context.world.clock), days: days)
        if let out = arguments.value("html") {
            do {
                try FileSystem.writeAtomically(Array(summary.page.utf8), to: out, durable: false)
            } catch let OfflinePkgError.io(_, _, errno) {
                throw OfflinePkgError.unavailable("cannot write \(out): \(errno)")
            }
        }
        if arguments.flag("json") {
            context.output.json(summary)
        } else {
            context.output.print(summary.table)
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}
