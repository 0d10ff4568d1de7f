import FoundationEssentials
import OfflinePkg
import OfflinePkgPublish

/// `keys init`, `keys rotate` and `keys show` (docs/protocol.md#keys-documents): a publisher's keys
/// documents, and what a device root trusts.
enum KeysCommands {
    static let repo = CommandSpec.Option(name: "repo", value: "DIR", help: "the repository folder; required")
    static let signKey = CommandSpec.Option(
        name: "sign-key", value: "FILE", repeatable: true, help: "a root key's minisign secret key, to sign the keys document")
    static let rootThreshold = CommandSpec.Option(
        name: "root-threshold", value: "N", help: "root keys that must sign the next keys version (default 1, or unchanged)")
    static let manifestThreshold = CommandSpec.Option(
        name: "manifest-threshold", value: "N", help: "manifest keys that must sign a manifest (default 1, or unchanged)")
    static let expires = CommandSpec.Option(
        name: "expires", value: "DATE|DAYS",
        help: "when devices stop trusting this version: days (365), a duration (90d) or a date (default 365 days)")

    static let initSpec = CommandSpec(
        name: "keys init", arguments: [],
        options: [
            repo, signKey, rootThreshold,
            .init(
                name: "manifest-key", value: "FILE", repeatable: true, help: "a manifest key's minisign public key; one or more"),
            manifestThreshold, expires, .json, .quiet,
        ],
        summary: "write keys/1.json: root keys (the --sign-key ones) and manifest keys, signed by the root keys",
        run: runInit)

    static let rotateSpec = CommandSpec(
        name: "keys rotate", arguments: [],
        options: [
            repo, signKey,
            .init(name: "add-root-key", value: "FILE", repeatable: true, help: "a public key to make a root key"),
            .init(name: "remove-root-key", value: "FILE", repeatable: true, help: "a root key's public key to remove"),
            .init(name: "add-manifest-key", value: "FILE", repeatable: true, help: "a public key to make a manifest key"),
            .init(
                name: "remove-manifest-key", value: "FILE", repeatable: true,
                help: "a manifest key's public key to remove (revokes it: devices refuse what it alone signs)"),
            rootThreshold, manifestThreshold, expires, .json, .quiet,
        ],
        summary: "write the next keys version, signed by a threshold of the current root keys and of the new ones",
        run: runRotate)

    static let showSpec = CommandSpec(
        name: "keys show", arguments: [],
        options: [
            .init(name: "repo", value: "DIR", help: "show a repository's keys versions, the chain verified"),
            .root, .json,
        ],
        summary: "show a repository's keys versions (--repo) or what a device root trusts (--root)",
        run: runShow)

    static func runInit(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let publisher = try self.publisher(arguments, context)
        let signers = try PublishCommand.signingKeys(arguments.all("sign-key"))
        guard !signers.isEmpty else { throw UsageError("keys init needs --sign-key ROOT.key: the root keys sign version 1") }
        let manifestKeys = try publicKeys(arguments, "manifest-key")
        guard !manifestKeys.isEmpty else {
            throw UsageError("keys init needs --manifest-key M.pub: the keys that will sign manifests")
        }
        let report = try publisher.initKeys(
            signers: signers,
            rootThreshold: try arguments.integer("root-threshold", in: 1...KeysDocument.maximumKeysPerRole) ?? 1,
            manifestKeys: manifestKeys,
            manifestThreshold: try arguments.integer("manifest-threshold", in: 1...KeysDocument.maximumKeysPerRole) ?? 1,
            expires: try expiry(arguments, now: context.world.clock.now()), waiting: waiting(arguments, context))
        return finish(report, arguments, context)
    }

    static func runRotate(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let publisher = try self.publisher(arguments, context)
        let signers = try PublishCommand.signingKeys(arguments.all("sign-key"))
        guard !signers.isEmpty else {
            throw UsageError("keys rotate needs --sign-key ROOT.key: a threshold of the current root keys signs the next version")
        }
        var change = KeysChange()
        change.addRoot = try publicKeys(arguments, "add-root-key")
        change.removeRoot = try publicKeys(arguments, "remove-root-key")
        change.addManifest = try publicKeys(arguments, "add-manifest-key")
        change.removeManifest = try publicKeys(arguments, "remove-manifest-key")
        change.rootThreshold = try arguments.integer("root-threshold", in: 1...KeysDocument.maximumKeysPerRole)
        change.manifestThreshold = try arguments.integer("manifest-threshold", in: 1...KeysDocument.maximumKeysPerRole)
        change.expires = try expiry(arguments, now: context.world.clock.now())
        let report = try publisher.rotateKeys(signers: signers, change: change, waiting: waiting(arguments, context))
        return finish(report, arguments, context)
    }

    static func runShow(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        switch (arguments.value("repo"), arguments.value("root")) {
        case (let repo?, nil):
            let keys = try RepositoryKeys.load(RepositoryLayout(root: repo))
            guard !keys.versions.isEmpty else { throw OfflinePkgError.unavailable("no keys documents in \(repo)/keys") }
            let versions = keys.versions.map(VersionText.init)
            if arguments.flag("json") {
                context.output.json(RepositoryText(versions: versions, chain: "verified"))
                return OfflinePkgCommand.ExitStatus.success
            }
            var lines = versions.map(\.line)
            lines.append("chain: verified from version 1 to \(keys.versions.count)")
            context.output.print(lines.joined(separator: "\n"))
        case (nil, _):
            let trust = try context.openRoot(arguments).trust()
            if arguments.flag("json") {
                context.output.json(["trust": trust])
                return OfflinePkgCommand.ExitStatus.success
            }
            context.output.print(
                trust.isEmpty
                    ? "the root trusts nothing: no signed manifest was accepted with keys yet"
                    : trust.flatMap(TrustText.lines).joined(separator: "\n"))
        default:
            throw UsageError("keys show takes --repo DIR or --root DIR, not both")
        }
        return OfflinePkgCommand.ExitStatus.success
    }

    /// One keys version as `keys show --repo` prints it.
    struct VersionText: Encodable {
        var version: Int
        var expires: Date?
        var rootKeys: [String]
        var rootThreshold: Int
        var manifestKeys: [String]
        var manifestThreshold: Int
        var signedBy: [String]
        var sha256: String

        init(_ version: RepositoryKeys.Version) {
            let document = version.document
            self.version = document.version
            expires = document.expires
            (rootKeys, rootThreshold) = (document.root.keyIDs, document.root.threshold)
            (manifestKeys, manifestThreshold) = (document.manifest.keyIDs, document.manifest.threshold)
            signedBy = version.signedBy.map(\.keyID)
            sha256 = SHA256.hash(document.bytes).hex
        }

        var line: String {
            "keys/\(version).json  expires \(expires.map(RFC3339.format) ?? "never")  root \(rootKeys.joined(separator: ", ")) (\(rootThreshold) of \(rootKeys.count))"
                + "  manifest \(manifestKeys.joined(separator: ", ")) (\(manifestThreshold) of \(manifestKeys.count))  signed by \(signedBy.joined(separator: ", "))"
        }
    }

    struct RepositoryText: Encodable {
        var versions: [VersionText]
        var chain: String
    }

    private static func publisher(_ arguments: ParsedArguments, _ context: CLIContext) throws -> Publisher {
        guard let repo = arguments.value("repo") else { throw UsageError("needs --repo DIR") }
        return Publisher(repository: URL(fileURLWithPath: repo), clock: context.world.clock)
    }

    private static func publicKeys(_ arguments: ParsedArguments, _ name: String) throws -> [TrustedKey] {
        try arguments.all(name).map { path in
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("--\(name) \(path): no such file") }
            return try TrustedKey(contentsOfFile: path)
        }
    }

    /// `--expires`: a number of days, a duration (`90d`, `12h`), an RFC 3339 time or a date (`2028-01-01`).
    static func expiry(_ arguments: ParsedArguments, now: Date) throws -> Date? {
        guard let text = arguments.value("expires") else { return nil }
        if let days = Int(text), days > 0 { return now.addingTimeInterval(Double(days) * 86_400) }
        if let date = RFC3339.parse(text + "T00:00:00Z") { return date }
        do {
            return try PublishCommand.expiry(text, now: now)
        } catch {
            throw UsageError(
                "--expires takes a number of days, a duration such as 90d, or a date such as 2028-01-01, got \"\(text)\"")
        }
    }

    private static func waiting(_ arguments: ParsedArguments, _ context: CLIContext) -> () -> Void {
        let quiet = arguments.flag("quiet")
        let repo = arguments.value("repo") ?? ""
        return { if !quiet { context.output.info("waiting for another publish to \(repo) to finish") } }
    }

    private static func finish(_ report: KeysReport, _ arguments: ParsedArguments, _ context: CLIContext) -> Int32 {
        if arguments.flag("json") {
            context.output.json(report)
        } else if !arguments.flag("quiet") {
            var lines = [
                "wrote keys/\(report.version).json (expires \(report.expires.map(RFC3339.format) ?? "never")): root keys \(report.rootKeys.joined(separator: ", ")) (threshold \(report.rootThreshold)), manifest keys \(report.manifestKeys.joined(separator: ", ")) (threshold \(report.manifestThreshold))",
                "  signed by \(report.signedBy.joined(separator: ", "))",
            ]
            if !report.removed.isEmpty { lines.append("  removed \(report.removed.joined(separator: ", "))") }
            if !report.added.isEmpty { lines.append("  added   \(report.added.joined(separator: ", "))") }
            lines.append(
                "  next: publish with --sign-key for \(report.manifestThreshold) of \(report.manifestKeys.joined(separator: ", ")), and upload keys/ with the manifest"
            )
            context.output.print(lines.joined(separator: "\n"))
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}
