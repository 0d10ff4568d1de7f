import FoundationEssentials
import OfflinePkg
import OfflinePkgPublish

enum KeygenCommand {
    static let spec = CommandSpec(
        name: "keygen", arguments: ["<key-prefix>"],
        options: [.init(name: "force", value: nil, help: "overwrite existing key files")],
        summary: "write a minisign-compatible key pair: <key-prefix>.pub and <key-prefix>.key (unencrypted)",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let prefix = arguments.positionals[0]
        let key = SigningKey.generate()
        try key.write(prefix: prefix, overwrite: arguments.flag("force"))
        context.output.print("wrote \(prefix).pub and \(prefix).key (key id \(key.keyID))")
        context.output.warning(
            "keep \(prefix).key secret, never in the repository: a manifest key in your CI's secret store, a root key offline")
        return OfflinePkgCommand.ExitStatus.success
    }
}
