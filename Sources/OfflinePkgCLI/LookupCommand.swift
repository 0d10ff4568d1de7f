import Foundation
import OfflinePkg

enum LookupCommand {
    static let spec = CommandSpec(
        name: "lookup", arguments: ["<url>"], options: [.root, .json],
        summary: "print the local file that answers a URL (exit 1 when none does)", run: run)

    struct Answer: Encodable {
        var url: String
        var path: String
        var mimeType: String
        var size: Int64
        var packageID: String
        var version: String
        var etag: String
        var sha256: String
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
            context.output.json(
                Answer(
                    url: url, path: hit.path, mimeType: hit.mimeType, size: hit.size, packageID: hit.packageID,
                    version: hit.version, etag: hit.etag, sha256: hit.sha256))
        } else {
            context.output.print(hit.path)
        }
        return OfflinePkgCommand.ExitStatus.success
    }
}
