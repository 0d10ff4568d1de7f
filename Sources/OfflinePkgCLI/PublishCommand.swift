import FoundationEssentials
import OfflinePkg
import OfflinePkgPublish

#if canImport(Glibc)
import Glibc
#endif

enum PublishCommand {
    static let spec = CommandSpec(
        name: "publish", arguments: ["<site-dir>"],
        options: [
            .init(name: "repo", value: "DIR", help: "the repository folder (created if missing); required"),
            .init(name: "id", value: "ID", help: "package id, [a-z0-9][a-z0-9._-]{0,63}; required"),
            .init(name: "version", value: "V", help: "package version, [A-Za-z0-9._+-]{1,64}; required"),
            .init(name: "route", value: "URL", repeatable: true, help: "URL prefix the package answers (ends in /); one or more"),
            .init(name: "entry", value: "F", help: "file served for a path ending in / (default index.html)"),
            .init(name: "fallback", value: "F", help: "file served for a navigation miss (single-page apps)"),
            .init(name: "deltas", value: "N", help: "write deltas from the last N published versions (default 3)"),
            .init(
                name: "sign-key", value: "FILE", repeatable: true,
                help: "minisign secret key: signs the manifest; with keys documents, a threshold of their manifest keys"),
            .init(name: "rollout", value: "P", help: "percentage of devices that take this version (0-100)"),
            .init(name: "min-shell-version", value: "V", help: "oldest shell version that may take this version"),
            .init(
                name: "max-shell-version", value: "V",
                help: "newest shell version that may take this version, on its components (3.2: every 3.2.x)"),
            .init(
                name: "allow-downgrade", value: nil,
                help: "publish a version lower than the newest published for the package (refused otherwise)"),
            .init(
                name: "unsign", value: nil,
                help: "publish without --sign-key into a signed repository, removing its signature (refused otherwise)"),
            .init(
                name: "check", value: nil,
                help: "build the release and run the devices' checks on it; publish nothing"),
            .init(
                name: "expires", value: "WHEN",
                help: "manifest expiry for this publish only: a duration from now (30d, 12h, 90m) or an RFC 3339 time"),
            .init(name: "format", value: "FMT", help: "tar.zst (default: fastest to unpack on devices), tar.gz or zip"),
            .init(
                name: "expires-in", value: "DURATION",
                help: "expire the manifest DURATION (30d, 12h, 90m) after this and every later publish; off forgets it"),
            .init(name: "notes", value: "TEXT", help: "release notes, written into the package entry for shells to show"),
            .init(name: "mandatory", value: nil, help: "mark the release mandatory: shells apply it at once"),
            .init(name: "compression-level", value: "N", help: "zstd 1-19 (default 3), gzip and zip 1-9 (default 9)"),
            .init(
                name: "layout", value: "L",
                help: "tar.zst layout: chunked (default: a zstd frame per file, plus a file index) or solid"),
            .init(
                name: "runtime", value: "FILE",
                help: "set the manifest's runtime-cache rules from a JSON file (kept by later publishes without it)"),
            .init(
                name: "reports", value: "URL",
                help: "devices POST install reports to URL (kept by later publishes); none stops them"),
            .json, .quiet,
        ],
        summary: "pack a site folder into a repository: archive, deltas, manifest (sequence + 1), signature",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        guard let repo = arguments.value("repo") else { throw UsageError("publish needs --repo DIR") }
        guard let id = arguments.value("id") else { throw UsageError("publish needs --id ID") }
        guard let version = arguments.value("version") else { throw UsageError("publish needs --version V") }
        let routes = arguments.all("route")
        guard !routes.isEmpty else { throw UsageError("publish needs at least one --route URL") }
        var format = ArchiveFormat.tarZstd
        if let text = arguments.value("format") {
            guard let chosen = ArchiveFormat(rawValue: text) else {
                throw UsageError(
                    "--format takes \(ArchiveFormat.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(text)\"")
            }
            format = chosen
        }
        var request = PublishRequest(
            site: arguments.positionals[0], id: id, version: version, routes: routes,
            entry: arguments.value("entry") ?? "index.html", fallback: arguments.value("fallback"),
            deltaCount: try arguments.integer("deltas", in: 0...100) ?? 3,
            rollout: try arguments.integer("rollout", in: 0...100), minShellVersion: arguments.value("min-shell-version"),
            format: format, expires: try arguments.value("expires").map { try expiry($0, now: context.world.clock.now()) })
        request.maxShellVersion = arguments.value("max-shell-version")
        request.allowDowngrade = arguments.flag("allow-downgrade")
        request.expiresIn = try arguments.value("expires-in").map(duration)
        request.notes = arguments.value("notes")
        request.mandatory = arguments.flag("mandatory")
        request.requireEntry = arguments.value("entry") != nil
        request.compressionLevel = try arguments.integer("compression-level", in: 1...19)
        if let text = arguments.value("layout") {
            guard let layout = ArchiveLayout(rawValue: text) else {
                throw UsageError(
                    "--layout takes \(ArchiveLayout.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(text)\"")
            }
            request.layout = layout
        }
        if let path = arguments.value("runtime") { request.runtime = try runtimeRules(path) }
        if let reports = arguments.value("reports") { request.reports = reports == "none" ? .remove : .set(reports) }

        // SIGINT and SIGTERM end a publish where it stands, even if our parent left them ignored: nothing
        // has a published name before the last stage, and the next publish clears `.tmp/`.
        for number in [SIGINT, SIGTERM] { signal(number, SIG_DFL) }
        let signingKeys = try self.signingKeys(arguments.all("sign-key"))
        let quiet = arguments.flag("quiet")
        let progress = PublishProgress(
            style: quiet ? .none : (context.output.stderrIsTerminal ? .bars : .lines), output: context.output, clock: context.world.clock)
        let report = try Publisher(repository: URL(fileURLWithPath: repo), clock: context.world.clock).publish(
            request, signingKeys: signingKeys, unsign: arguments.flag("unsign"), checkOnly: arguments.flag("check"),
            waiting: { if !quiet { context.output.info("waiting for another publish to \(repo) to finish") } },
            events: { progress.handle($0) })
        progress.finish()
        for warning in report.warnings { context.output.warning("warning: \(warning)") }
        if arguments.flag("json") {
            context.output.json(report)
        } else if !quiet {
            context.output.print(summary(report))
        }
        return OfflinePkgCommand.ExitStatus.success
    }

    /// The `runtime` object in `path`, checked as a device checks the manifest's.
    static func runtimeRules(_ path: String) throws -> RuntimeConfiguration {
        let bytes = try FileSystem.read(path, limit: 1 << 20)
        guard let document = try? JSONDocument(parsing: bytes) else {
            throw OfflinePkgError.invalidManifest(source: path, field: "runtime", reason: "not valid JSON")
        }
        return try RuntimeConfiguration(json: document.root, source: path)
    }

    static func summary(_ report: PublishReport) -> String {
        let verb = report.checkedOnly ? "check passed: devices would accept" : "published"
        var lines = [
            "\(verb) \(report.id) \(report.version) as sequence \(report.sequence)\(report.republished ? " (same content as before)" : "")",
            "  archive \(report.archive.url)  \(ProgressReporter.format(report.archive.size))  \(report.files) files",
            "  tree    \(report.tree)",
        ]
        if let index = report.fileIndex {
            lines.insert("  files   \(index.url)  \(ProgressReporter.format(index.size))  file index", at: 2)
        }
        for delta in report.deltas {
            lines.append(
                "  delta   \(delta.file.url)  \(ProgressReporter.format(delta.file.size))  \(delta.changed) changed, \(delta.deleted) deleted"
            )
        }
        for skipped in report.skippedDeltas {
            lines.append("  no delta from \(skipped.from): \(skipped.reason)")
        }
        if report.signed {
            let under = report.keysVersion.map { " under keys version \($0)" } ?? ""
            lines.append("  signed  by \(report.signers.joined(separator: ", "))\(under)")
        } else {
            lines.append("  unsigned (no --sign-key)")
        }
        if report.checkedOnly { lines.append("  nothing was published (--check)") }
        if let from = report.promotedFrom { lines.append("  promoted from \(from)") }
        if let carried = report.keysCarried, !carried.isEmpty {
            lines.append("  keys    carried keys/\(carried.map { "\($0).json" }.joined(separator: ", keys/")) from the source")
        }
        return lines.joined(separator: "\n")
    }

    /// The `--sign-key` files, read as minisign secret keys.
    static func signingKeys(_ paths: [String]) throws -> [SigningKey] {
        try paths.map { try SigningKey(contentsOfFile: $0) }
    }

    /// `--expires-in`: `30d`, `12h`, `90m` as seconds; `off` (0) forgets a remembered one.
    static func duration(_ text: String) throws -> TimeInterval {
        if text == "off" || text == "0" { return 0 }
        let units: [Character: Double] = ["d": 86_400, "h": 3_600, "m": 60]
        if let unit = text.last.flatMap({ units[$0] }), let count = Double(text.dropLast()), count > 0, count.isFinite {
            return count * unit
        }
        throw UsageError("--expires-in takes a duration such as 30d, 12h or 90m, or off, got \"\(text)\"")
    }

    /// `30d`, `12h`, `90m` from now, or an RFC 3339 time.
    static func expiry(_ text: String, now: Date) throws -> Date {
        if let date = RFC3339.parse(text) { return date }
        let units: [Character: Double] = ["d": 86_400, "h": 3_600, "m": 60]
        if let unit = text.last.flatMap({ units[$0] }), let count = Double(text.dropLast()), count > 0 {
            return now.addingTimeInterval(count * unit)
        }
        throw UsageError("--expires takes a duration such as 30d, 12h or 90m, or an RFC 3339 time, got \"\(text)\"")
    }
}
