import FoundationEssentials
import OfflinePkg
import OfflinePkgPublish

/// `history`: what a repository has published, package by package (docs/publishing.md).
enum HistoryCommand {
    static let spec = CommandSpec(
        name: "history", arguments: [],
        options: [.init(name: "repo", value: "DIR", help: "the repository folder; required"), .json],
        summary: "list each package's published versions with dates and notes", run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        guard let repo = arguments.value("repo") else { throw UsageError("history needs --repo DIR") }
        guard FileManager.default.fileExists(atPath: repo + "/manifest.json") else {
            throw OfflinePkgError.unavailable("no repository at \(repo): it has no manifest.json")
        }
        let packages = try Publisher(repository: URL(fileURLWithPath: repo), clock: context.world.clock).history()
        if arguments.flag("json") {
            context.output.json(["packages": packages.map(JSONPackage.init)])
            return OfflinePkgCommand.ExitStatus.success
        }
        var lines = [String]()
        for package in packages {
            let offer = package.current.map { " (manifest offers \($0)\(package.disabled == true ? ", disabled" : ""))" }
            lines.append("\(package.id)\(offer ?? " (not in the manifest)")")
            for release in package.releases.reversed() {
                var text = "  \(release.version)  \(RFC3339.format(release.publishedAt))"
                if release.sequence > 0 { text += "  sequence \(release.sequence)" }
                if let action = release.action { text += "  \(action == .remove ? "removed" : action.rawValue + "d")" }
                if let rollout = release.rollout { text += "  rollout \(rollout)%" }
                if release.mandatory { text += "  mandatory" }
                if let from = release.promotedFrom { text += "  promoted from \(from)" }
                lines.append(text)
                if let notes = release.notes { lines.append("    \(notes)") }
            }
        }
        context.output.print(lines.isEmpty ? "nothing published in \(repo)" : lines.joined(separator: "\n"))
        return OfflinePkgCommand.ExitStatus.success
    }
}

extension HistoryCommand {
    /// A package's history as `--json` prints it: each release's `entry` as the JSON object the
    /// manifest held, not as a string of JSON inside the JSON.
    struct JSONPackage: Encodable {
        var id: String
        var current: String?
        var releases: [JSONRelease]

        var disabled: Bool?

        init(_ package: PublishHistory.Package) {
            (id, current, releases) = (package.id, package.current, package.releases.map(JSONRelease.init))
            disabled = package.disabled
        }
    }

    struct JSONRelease: Encodable {
        var record: PublishHistory.Record

        init(_ record: PublishHistory.Record) { self.record = record }

        private enum CodingKeys: String, CodingKey { case entry }

        func encode(to encoder: any Encoder) throws {
            var plain = record
            plain.entry = nil
            try plain.encode(to: encoder)
            let entry = record.entry.flatMap { try? JSONDocument(parsing: Array($0.utf8)).root }
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(entry, forKey: .entry)
        }
    }
}

/// `promote`: one published version copied from one repository into another and published there.
enum PromoteCommand {
    static let spec = CommandSpec(
        name: "promote", arguments: [],
        options: [
            .init(name: "from", value: "REPO", help: "the repository the version was published in (e.g. staging); required"),
            .init(name: "to", value: "REPO", help: "the repository to publish it in (e.g. production); required"),
            .init(name: "id", value: "ID", help: "package id; required"),
            .init(name: "version", value: "V", help: "the published version to promote; required"),
            .init(
                name: "sign-key", value: "FILE", repeatable: true,
                help: "minisign secret key for the target's manifest; with keys documents, a threshold of their manifest keys"),
            .init(
                name: "unsign", value: nil,
                help: "promote without --sign-key into a signed repository, removing its signature (refused otherwise)"),
            .json, .quiet,
        ],
        summary: "copy one published version (archives, deltas, file index) into another repository and publish it there",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        var values = [String: String]()
        for name in ["from", "to", "id", "version"] {
            guard let value = arguments.value(name) else { throw UsageError("promote needs --\(name)") }
            values[name] = value
        }
        let quiet = arguments.flag("quiet")
        let report = try Publisher(repository: URL(fileURLWithPath: values["to"]!), clock: context.world.clock).promote(
            id: values["id"]!, version: values["version"]!, from: URL(fileURLWithPath: values["from"]!),
            signingKeys: try PublishCommand.signingKeys(arguments.all("sign-key")), unsign: arguments.flag("unsign"),
            waiting: { if !quiet { context.output.info("waiting for another publish to \(values["to"]!) to finish") } })
        if arguments.flag("json") {
            context.output.json(report)
        } else if !quiet {
            context.output.print(PublishCommand.summary(report))
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}
