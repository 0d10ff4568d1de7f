import FoundationEssentials
import OfflinePkg
import OfflinePkgPublish

/// `remove`: a package taken out of the manifest, or its release disabled or enabled again, in a new
/// manifest (sequence + 1): how a publisher heals a release devices refuse.
enum RemoveCommand {
    static let spec = CommandSpec(
        name: "remove", arguments: [],
        options: [
            .init(name: "repo", value: "DIR", help: "the repository folder; required"),
            .init(name: "id", value: "ID", help: "the package; required"),
            .init(
                name: "disable", value: nil,
                help: "keep the package but disable its release: devices do not take it, and keep what they have"),
            .init(name: "enable", value: nil, help: "enable a disabled release again: devices take it at their next sync"),
            .init(
                name: "sign-key", value: "FILE", repeatable: true,
                help: "minisign secret key: signs the new manifest; with keys documents, a threshold of their manifest keys"),
            .init(
                name: "unsign", value: nil,
                help: "write the manifest without --sign-key into a signed repository, removing its signature"),
            .json, .quiet,
        ],
        summary: "take a package out of the manifest (devices stop serving it), or disable/enable its release",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        guard let repo = arguments.value("repo") else { throw UsageError("remove needs --repo DIR") }
        guard let id = arguments.value("id") else { throw UsageError("remove needs --id ID") }
        guard !(arguments.flag("disable") && arguments.flag("enable")) else {
            throw UsageError("--disable and --enable contradict each other: give one")
        }
        let action: PackageWithdrawal = arguments.flag("disable") ? .disable : arguments.flag("enable") ? .enable : .remove
        let quiet = arguments.flag("quiet")
        let report = try Publisher(repository: URL(fileURLWithPath: repo), clock: context.world.clock).withdraw(
            id: id, action, signingKeys: try PublishCommand.signingKeys(arguments.all("sign-key")), unsign: arguments.flag("unsign"),
            waiting: { if !quiet { context.output.info("waiting for another publish to \(repo) to finish") } })
        if arguments.flag("json") {
            context.output.json(report)
        } else if !quiet {
            let done: String
            switch report.action {
            case .remove:
                done = "removed \(report.id) (\(report.version) was offered): devices stop serving it at their next sync"
            case .disable: done = "disabled \(report.id) \(report.version): devices do not take it, and keep what they have"
            case .enable: done = "enabled \(report.id) \(report.version): devices take it at their next sync"
            }
            context.output.print(
                report.changed
                    ? "\(done)\n  manifest sequence \(report.sequence), \(report.signed ? "signed" : "unsigned (no --sign-key)")"
                    : "\(report.id) \(report.version) is \(report.action.rawValue)d already: nothing written")
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}
