import Foundation
import OfflinePkg

enum SyncCommand {
    static let spec = CommandSpec(
        name: "sync", arguments: ["<manifest-url>"],
        options: [
            .root,
            .init(name: "jobs", value: "N", help: "parallel downloads (default 4)"),
            .init(
                name: "trust-key", value: "FILE", repeatable: true,
                help: "minisign public key; the manifest must be signed by one"),
            .init(name: "shell-version", value: "V", help: "this shell's version, compared with minShellVersion"),
            .init(name: "min-interval", value: "S", help: "skip the network if the last check is younger than S seconds"),
            .init(name: "jitter", value: "S", help: "sleep a random 0..S seconds first (fleets on one timer)"),
            .init(name: "stall-timeout", value: "S", help: "abort a transfer with no byte for S seconds (default 30)"),
            .init(
                name: "min-rate", value: "BYTES",
                help: "abort a transfer averaging under BYTES/s over the window (default 1024; 0 turns it off)"),
            .init(name: "min-rate-window", value: "S", help: "the window of --min-rate, in seconds (default 30)"),
            .init(
                name: "manifest-deadline", value: "S",
                help: "the manifest, and the signature, must each arrive within S seconds (default 60)"),
            .wait,
            .init(name: "ca-bundle", value: "FILE", help: "trust these certificate authorities (PEM) for https"),
            .init(name: "keep-history", value: "N", help: "activations kept for status (default 100)"),
            .json, .quiet,
        ],
        summary: "fetch the manifest, download what changed, verify it, switch the active set atomically",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let manifestURL = try ManifestLocation.url(from: arguments.positionals[0])
        var keys = [TrustedKey]()
        for path in arguments.all("trust-key") {
            // A key file that is not there is a mistake in the command line, not a failure of the sync.
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("--trust-key \(path): no such file") }
            keys.append(try TrustedKey(contentsOfFile: path))
        }
        if let stall = try arguments.seconds("stall-timeout"), stall <= 0 {
            throw UsageError("--stall-timeout takes a number of seconds above 0, got \(stall)")
        }
        for name in ["min-rate-window", "manifest-deadline"] {
            if let seconds = try arguments.seconds(name), seconds <= 0 {
                throw UsageError("--\(name) takes a number of seconds above 0, got \(seconds)")
            }
        }
        if let version = arguments.value("shell-version"), ShellVersion(version) == nil {
            throw UsageError("--shell-version takes a dotted numeric version such as 3.2, got \"\(version)\"")
        }
        // SPEC §8: progress on stderr, bars on a terminal, lines otherwise, nothing with --quiet; --json
        // changes stdout only.
        let style: ProgressReporter.Style =
            arguments.flag("quiet") ? .none : (context.output.stderrIsTerminal ? .bars : .lines)
        let reporter = ProgressReporter(style: style, output: context.output)
        var options = Updater.Options(
            trustedKeys: keys, minInterval: try arguments.seconds("min-interval") ?? 0,
            jobs: try arguments.integer("jobs", in: 1...64) ?? 4, shellVersion: arguments.value("shell-version"),
            stallTimeout: try arguments.seconds("stall-timeout") ?? 30, waitForLock: arguments.flag("wait"),
            caBundle: arguments.value("ca-bundle"),
            events: { reporter.handle($0) })
        options.minimumRate = Int64(try arguments.integer("min-rate", in: 0...(1 << 40)) ?? 1024)
        options.minimumRateWindow = try arguments.seconds("min-rate-window") ?? 30
        options.manifestDeadline = try arguments.seconds("manifest-deadline") ?? 60
        if let limit = try arguments.integer("keep-history", in: 1...100_000) { options.historyLimit = limit }
        if let jitter = try arguments.seconds("jitter"), jitter > 0 {
            try await Task.sleep(nanoseconds: UInt64(Double.random(in: 0...jitter) * 1_000_000_000))
        }
        // This process reads nothing from the root: no PackageStore, no lookup index, no reader lease.
        let report = try await Updater.syncOnce(root: context.root(arguments), manifestURL: manifestURL, options: options)
        reporter.finish()
        if arguments.flag("json") {
            context.output.json(report)
        } else if !arguments.flag("quiet") {
            context.output.print(summary(report))
        }
        return OfflinePkgCommand.ExitStatus.success
    }

    static func summary(_ report: SyncReport) -> String {
        switch report.outcome {
        case .skipped: return "skipped: checked less than --min-interval ago"
        case .notModified: return "up to date (not modified)"
        case .upToDate: return "up to date (set \(report.generation), sequence \(report.sequence))"
        case .activated:
            let changes = report.changes.map { "\($0.id) \($0.from ?? "-") -> \($0.to ?? "removed")" }
            return
                "activated set \(report.generation) (sequence \(report.sequence), \(ProgressReporter.format(report.bytesFetched)) fetched): "
                + changes.joined(separator: ", ")
        }
    }
}
