import Dispatch
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

enum SyncCommand {
    static let spec = CommandSpec(
        name: "sync", arguments: ["<manifest-url>"],
        options: [
            .root,
            .init(name: "jobs", value: "N", help: "parallel downloads (default 4)"),
            .init(
                name: "trust-key", value: "FILE", repeatable: true,
                help: "minisign public key; the manifest must be signed by one (fixed: no rotation)"),
            .init(
                name: "trust-root", value: "FILE",
                help: "keys document (keys/<N>.json) to follow: rotation, revocation, thresholds"),
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
            .init(
                name: "cacert", value: "FILE",
                help: "trust these certificate authorities (PEM) for https instead of the system's (a private CA)"),
            .init(name: "ca-bundle", value: "FILE", help: "the same as --cacert (its older name)"),
            .init(
                name: "dry-run", value: nil,
                help: "fetch and verify the manifest, print what a sync would fetch and switch; change nothing"),
            .init(name: "keep-history", value: "N", help: "activations kept for status (default 100)"),
            .init(
                name: "insecure", value: nil,
                help: "take an unsigned manifest over cleartext http from a host other than loopback (refused otherwise)"),
            .init(
                name: "no-reports", value: nil,
                help: "record and send no install reports, and drop those queued (also OFFLINEPKG_REPORTS=0)"),
            .json, .quiet,
        ],
        summary: "fetch the manifest, download what changed, verify it, switch the active set atomically",
        run: run)

    /// `--cacert FILE` (or `--ca-bundle`): a readable file, checked before any request, so a typo is a
    /// usage error and not every https transfer failing on its certificate. `serve --cacert` too.
    static func certificateAuthorities(_ arguments: ParsedArguments) throws -> String? {
        guard let path = arguments.value("cacert") ?? arguments.value("ca-bundle") else { return nil }
        guard access(path, R_OK) == 0, !FileSystem.isDirectory(path) else {
            throw UsageError("--cacert: \(path) is not a readable file of certificate authorities (PEM)")
        }
        return path
    }

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let path = context.rootPath(arguments)
        let dryRun = arguments.flag("dry-run")
        // The root as it is, not made here: where a sync that never started, or was interrupted, is noted.
        let found = CacheRoot(layout: CacheLayout(root: path), world: context.world)
        // SIGINT/SIGTERM end the sync with one line and 130/143; the active set stays as it was.
        let interruption = try TerminationSignals()
        defer { withExtendedLifetime(interruption) {} }
        let work = Task { try await sync(arguments, context, root: found, dryRun: dryRun) }
        interruption.onSignal { work.cancel() }
        do {
            return try await work.value
        } catch {
            if let signal = interruption.received {
                let name = signal == SIGINT ? "SIGINT" : "SIGTERM"
                let message = "interrupted by \(name); the active set is unchanged, the next sync resumes"
                if !dryRun { found.recordFailure(exitStatus: 128 + signal, message: message, counted: false) }
                context.output.error("offlinepkg sync: \(message)")
                if arguments.flag("json") {
                    context.output.json(OfflinePkgCommand.JSONFailure(error: message, exitStatus: 128 + signal))
                }
                return 128 + signal
            }
            throw error
        }
    }

    private static func sync(_ arguments: ParsedArguments, _ context: CLIContext, root found: CacheRoot, dryRun: Bool) async throws
        -> Int32
    {
        let manifestURL = try ManifestLocation.url(from: arguments.positionals[0])
        // Failures before the engine runs (a key file that does not parse) are noted in the root's
        // monitoring state as the engine notes its own; usage mistakes are not sync attempts.
        func noted<T>(_ body: () throws -> T) throws -> T {
            do {
                return try body()
            } catch let error as OfflinePkgError where !dryRun && error.category != .usage {
                found.recordFailure(error)
                throw error
            }
        }
        var keys = [TrustedKey]()
        for path in arguments.all("trust-key") {
            // A key file that is not there is a mistake in the command line, not a failure of the sync.
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("--trust-key \(path): no such file") }
            keys.append(try noted { try TrustedKey(contentsOfFile: path) })
        }
        var trustRoot: KeysDocument?
        if let path = arguments.value("trust-root") {
            guard keys.isEmpty else {
                throw UsageError(
                    "--trust-key and --trust-root are two ways to trust a manifest: give one (a keys document rotates)")
            }
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("--trust-root \(path): no such file") }
            trustRoot = try noted { try KeysDocument(contentsOfFile: path) }
        }
        // A root that remembers keys for this URL checks its signature as if they were given.
        let remembered = (try? SyncState.load(found.layout))?.trust?[Userinfo.removed(from: manifestURL)] != nil
        if keys.isEmpty, trustRoot == nil, !remembered { try checkUnsigned(manifestURL, arguments, context) }
        if let stall = try arguments.seconds("stall-timeout"), stall <= 0 {
            throw UsageError("--stall-timeout takes a number of seconds above 0, got \(stall)")
        }
        for name in ["min-rate-window", "manifest-deadline"] {
            if let seconds = try arguments.seconds(name), seconds <= 0 {
                throw UsageError("--\(name) takes a number of seconds above 0, got \(seconds)")
            }
        }
        // OFFLINEPKG_SHELL_VERSION stands for --shell-version (cron and timers, docs/protocol.md#who-takes-a-release).
        let fromEnvironment = context.environment["OFFLINEPKG_SHELL_VERSION"].flatMap { $0.isEmpty ? nil : $0 }
        let shellVersion = arguments.value("shell-version") ?? fromEnvironment
        if let version = shellVersion, ShellVersion(version) == nil {
            let source = arguments.value("shell-version") != nil ? "--shell-version" : "OFFLINEPKG_SHELL_VERSION"
            throw UsageError("\(source) takes a dotted numeric version such as 3.2, got \"\(version)\"")
        }
        // man/offlinepkg.1: progress on stderr, bars on a terminal, lines otherwise, nothing with --quiet; --json
        // changes stdout only.
        let style: ProgressReporter.Style =
            arguments.flag("quiet") ? .none : (context.output.stderrIsTerminal ? .bars : .lines)
        let reporter = ProgressReporter(style: style, output: context.output, clock: context.world.clock)
        var options = Updater.Options(
            trustedKeys: keys, minInterval: try arguments.seconds("min-interval") ?? 0,
            jobs: try arguments.integer("jobs", in: 1...64) ?? 4, shellVersion: shellVersion,
            stallTimeout: try arguments.seconds("stall-timeout") ?? 30, waitForLock: arguments.flag("wait"),
            caBundle: try certificateAuthorities(arguments),
            events: { reporter.handle($0) }, trustRoot: trustRoot)
        options.minimumRate = Int64(try arguments.integer("min-rate", in: 0...(1 << 40)) ?? 1024)
        options.minimumRateWindow = try arguments.seconds("min-rate-window") ?? 30
        options.manifestDeadline = try arguments.seconds("manifest-deadline") ?? 60
        if let limit = try arguments.integer("keep-history", in: 1...100_000) { options.historyLimit = limit }
        options.reports = try reportsEnabled(arguments, context)
        if dryRun {
            // The same stages as a sync up to its plan, nothing written: the root need not exist.
            let path = found.layout.root
            let root = CacheRoot(layout: CacheLayout(root: (try? FileSystem.realPath(path)) ?? path), world: context.world)
            let plan = try await Updater(root: root, manifestURL: manifestURL, options: options).plan()
            reporter.finish()
            if arguments.flag("json") {
                context.output.json(plan)
            } else if !arguments.flag("quiet") {
                context.output.print(summary(plan))
            }
            return OfflinePkgCommand.ExitStatus.success
        }
        if let jitter = try arguments.seconds("jitter"), jitter > 0 {
            try await Task.sleep(nanoseconds: UInt64(Double.random(in: 0...jitter) * 1_000_000_000))
        }
        // This process reads nothing from the root: no PackageStore, no lookup index, no reader lease. The
        // same `Updater.sync()` as a host's, so the same events (`.failed` included).
        let root = try CacheRoot(creating: found.layout.root, world: context.world)
        let updater = Updater(root: root, manifestURL: manifestURL, options: options)
        let report: SyncReport
        do {
            report = try await updater.sync()
        } catch {
            // The failure is reported too; its send ends (or gives up) before the process does.
            await updater.reportsSent()
            throw error
        }
        reporter.finish()
        if arguments.flag("json") {
            context.output.json(report)
        } else if !arguments.flag("quiet") {
            context.output.print(summary(report))
        }
        // Printed first: the result never waits on the collector; the process ends when the send has.
        await updater.reportsSent()
        return OfflinePkgCommand.ExitStatus.success
    }

    /// docs/protocol.md#neighbours-on-the-device, unsigned over cleartext: without a trusted key nothing vouches for the manifest but the
    /// channel it came over. Over plain http from another host, anyone on the network path (a café's
    /// Wi-Fi, a captive portal) could hand the device any package: refused unless `--insecure`. Over
    /// https, from a file or from this machine it is taken, with a warning.
    private static func checkUnsigned(_ url: URL, _ arguments: ParsedArguments, _ context: CLIContext) throws {
        let host = url.host ?? ""
        if url.scheme?.lowercased() == "http", !isLoopback(host), !arguments.flag("insecure") {
            throw UsageError(
                "refusing an unsigned manifest over cleartext http from \(host): anyone on the network path could change it; pass --trust-key FILE with the key it is signed with (publish --sign-key), use https, or --insecure to take it anyway"
            )
        }
        if !arguments.flag("quiet") {
            context.output.warning(
                "warning: the manifest is not signed (no --trust-key or --trust-root): nothing checks who published it")
        }
    }

    /// `localhost` (and names below it), 127.0.0.0/8 and ::1.
    private static func isLoopback(_ host: String) -> Bool {
        let name = host.lowercased().trimming { $0 == "[" || $0 == "]" }
        if name == "localhost" || name.hasSuffix(".localhost") || name == "::1" { return true }
        var address = in_addr()
        return inet_pton(AF_INET, name, &address) == 1 && UInt32(bigEndian: address.s_addr) >> 24 == 127
    }

    /// `--no-reports`, or `OFFLINEPKG_REPORTS` set to `0` (or `off`, `false`, `no`): reports off.
    static func reportsEnabled(_ arguments: ParsedArguments, _ context: CLIContext) throws -> Bool {
        if arguments.flag("no-reports") { return false }
        guard let value = context.environment["OFFLINEPKG_REPORTS"]?.lowercased(), !value.isEmpty else { return true }
        switch value {
        case "0", "off", "false", "no": return false
        case "1", "on", "true", "yes": return true
        default: throw UsageError("OFFLINEPKG_REPORTS takes 0 (reports off) or 1, got \"\(value)\"")
        }
    }

    static func summary(_ plan: SyncPlan) -> String {
        var lines = [
            plan.wouldActivate
                ? "would activate sequence \(plan.sequence) (\(ProgressReporter.format(plan.bytesToFetch)) to fetch)\(plan.mandatory ? ", mandatory" : "")"
                : "up to date: sequence \(plan.sequence) asks for nothing new"
        ]
        for step in plan.steps {
            let what = step.to.map { "\(step.from ?? "-") -> \($0) via \(step.via ?? .cache)" } ?? "\(step.from ?? "-") -> removed"
            lines.append(
                "  \(step.id) \(what)\(step.bytes > 0 ? " (\(ProgressReporter.format(step.bytes)))" : "")"
                    + (step.mandatory == true ? " mandatory" : "") + (step.notes.map { ": \($0)" } ?? ""))
        }
        for held in plan.heldBack { lines.append("  held back \(held.id) \(held.version): \(held.reason)") }
        return lines.joined(separator: "\n")
    }

    static func summary(_ report: SyncReport) -> String {
        switch report.outcome {
        case .skipped: return "skipped: checked less than --min-interval ago"
        case .notModified: return "up to date (not modified)"
        case .upToDate: return "up to date (set \(report.generation), sequence \(report.sequence))"
        case .activated:
            let changes = report.changes.map {
                "\($0.id) \($0.from ?? "-") -> \($0.to ?? "removed")\($0.mandatory == true ? " (mandatory)" : "")"
            }
            return
                "activated set \(report.generation) (sequence \(report.sequence), \(ProgressReporter.format(report.bytesFetched)) fetched): "
                + changes.joined(separator: ", ")
        }
    }
}
