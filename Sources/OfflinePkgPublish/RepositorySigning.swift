import OfflinePkg

/// Whether a repository is signed, and whether a release may be written with the signing it is given.
/// A repository is signed when it holds `manifest.json.minisig`: its devices may trust a key, and an
/// unsigned manifest written there would remove the signature and make every such device refuse every
/// sync. Kept apart from the writers so that a repository signed by several keys adds a state here,
/// not a rule in each command.
package enum RepositorySigning: Sendable, Equatable {
    case unsigned
    /// `manifest.json.minisig` is there.
    case signed

    package init(_ layout: RepositoryLayout) {
        self = FileSystem.exists(layout.signature) ? .signed : .unsigned
    }

    /// Refuses to write an unsigned manifest into a signed repository unless `unsign` says that is meant
    /// (`--unsign`); `signs`: the release is signed (`--sign-key`).
    package func check(signs: Bool, unsign: Bool, repository: String) throws {
        if signs && unsign {
            throw OfflinePkgError.invalidArgument("--sign-key and --unsign contradict each other: give one")
        }
        guard self == .signed, !signs, !unsign else { return }
        throw OfflinePkgError.publishRefused(
            reason:
                "\(repository) is signed (manifest.json.minisig): an unsigned manifest would remove the signature, and every device that trusts a key would refuse every sync; pass --sign-key FILE, or --unsign to publish it unsigned on purpose"
        )
    }
}
