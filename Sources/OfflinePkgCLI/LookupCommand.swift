import Foundation
import OfflinePkg

enum LookupCommand {
    static let spec = CommandSpec(
        name: "lookup", arguments: ["<url>"], options: [.root, .json],
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
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else {
            throw UsageError("lookup takes an absolute http or https URL, got \"\(url)\"")
        }
        let store = try context.openStore(arguments)
        guard let hit = store.resolve(url) else {
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
