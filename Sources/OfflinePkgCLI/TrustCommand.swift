import FoundationEssentials
import OfflinePkg

/// `trust --reset`: the one way to make a root forget what it trusts for a manifest URL
/// (docs/protocol.md#keys-documents: "a root remembers its trust"), so that a typo in a cron line never
/// turns signature checks off silently.
enum TrustCommand {
    static let spec = CommandSpec(
        name: "trust", arguments: ["[manifest-url]"],
        options: [
            .root,
            .init(
                name: "reset", value: nil,
                help: "forget the keys or keys document trusted for the URL (every URL without one)"),
            .wait, .json,
        ],
        summary: "forget what a root trusts to sign a manifest URL, so that it takes unsigned manifests again",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        guard arguments.flag("reset") else {
            throw UsageError("trust needs --reset (what a root trusts: `offlinepkg status` or `offlinepkg keys show --root DIR`)")
        }
        let url = try arguments.positionals.first.map { try ManifestLocation.url(from: $0).absoluteString }
        let forgotten = try context.openRoot(arguments).forgetTrust(for: url, wait: arguments.flag("wait"))
        if arguments.flag("json") {
            context.output.json(["forgotten": forgotten])
            return OfflinePkgCommand.ExitStatus.success
        }
        guard !forgotten.isEmpty else {
            context.output.print("nothing to forget: the root trusts nothing for \(url ?? "any manifest URL")")
            return OfflinePkgCommand.ExitStatus.success
        }
        for trust in forgotten {
            context.output.print(
                "forgot \(TrustText.summary(trust)) for \(trust.manifestURL): a sync of it given no keys takes an unsigned manifest"
            )
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}

/// What a root trusts, as `status` and `keys show --root` print it.
enum TrustText {
    static func summary(_ trust: TrustStatus) -> String {
        if let version = trust.keysVersion { return "keys version \(version)" }
        return (trust.manifestKeys.count == 1 ? "key " : "keys ") + trust.manifestKeys.joined(separator: ", ")
    }

    static func lines(_ trust: TrustStatus) -> [String] {
        var text = "\(trust.manifestURL): \(summary(trust))"
        if trust.kind == "keys-document" {
            text += ", expires \(trust.expires.map(RFC3339.format) ?? "never")"
            text += "; root keys \(trust.rootKeys?.joined(separator: ", ") ?? "") (threshold \(trust.rootThreshold ?? 0))"
            text += "; manifest keys \(trust.manifestKeys.joined(separator: ", ")) (threshold \(trust.manifestThreshold))"
        }
        text += "; since \(RFC3339.format(trust.since))"
        var lines = [text]
        if let removed = trust.removedKeys, !removed.isEmpty {
            lines.append(
                "  removed: "
                    + removed.sorted { ($0.value, $0.key) < ($1.value, $1.key) }.map { "\($0.key) (keys version \($0.value))" }
                    .joined(separator: ", "))
        }
        if let reset = trust.baselineReset {
            lines.append(
                "  rollback baseline reset\(reset.keysVersion.map { " at keys version \($0)" } ?? "") (was sequence \(reset.sequence)), \(RFC3339.format(reset.time))"
            )
        }
        return lines
    }
}
