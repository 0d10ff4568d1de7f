import FoundationEssentials
import OfflinePkg

enum LookupCommand {
    static let spec = CommandSpec(
        name: "lookup", arguments: ["<url>"],
        options: [
            .root, .json,
            .init(
                name: "scheme", value: "NAME=http|https", repeatable: true,
                help: "resolve URLs of a shell's custom scheme as http(s), as PackageStore.Options.customSchemes does (app=https)"
            ),
        ],
        summary: "print the local file that answers a URL (exit 1 when none does)", run: run)

    /// The resource's fields, with the URL that was asked for beside them in the same object.
    struct Answer: Encodable {
        var url: String
        var resource: Resource

        private enum CodingKeys: String, CodingKey { case url }

        func encode(to encoder: any Encoder) throws {
            try resource.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(url, forKey: .url)
        }
    }

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let url = arguments.positionals[0]
        let lower = url.lowercased()
        var schemes = [String: String]()
        for mapping in arguments.all("scheme") {
            let parts = mapping.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw UsageError("--scheme takes NAME=http or NAME=https, got \"\(mapping)\"") }
            schemes[parts[0]] = parts[1]
        }
        let custom = schemes.keys.contains { lower.hasPrefix($0.lowercased() + "://") }
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") || custom else {
            throw UsageError("lookup takes an absolute http or https URL (or one of a --scheme), got \"\(url)\"")
        }
        var store = try context.openStore(arguments)
        if !schemes.isEmpty {
            do {
                store = try PackageStore(
                    root: URL(fileURLWithPath: store.layout.root), options: .init(watchInterval: 0, customSchemes: schemes))
            } catch OfflinePkgError.invalidArgument(let reason) {
                throw UsageError(reason)
            }
        }
        guard let hit = store.resolve(url) else {
            if let location = store.redirect(for: url) {
                // What serve answers with a 301: the folder's URL ends in a slash.
                throw OfflinePkgError.unavailable("\(url) names a folder: serve redirects it to \(location)")
            }
            throw OfflinePkgError.unavailable("no active package answers \(url)")
        }
        if arguments.flag("json") {
            context.output.json(Answer(url: url, resource: hit))
        } else {
            context.output.print(hit.path)
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}
