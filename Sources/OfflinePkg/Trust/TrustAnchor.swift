/// What a device trusts to sign the manifests of one URL (docs/protocol.md#keys-documents).
package enum TrustAnchor: Sendable, Equatable {
    /// Fixed minisign keys (`--trust-key`, `Updater.Options.trustedKeys`): a signature by any one of them.
    case keys([TrustedKey])
    /// A keys document, followed along its chain of versions (`--trust-root`, `Updater.Options.trustRoot`).
    case document(KeysDocument)

    /// Who signs manifests, as a role: fixed keys are a threshold of one.
    package var manifestRole: KeysDocument.Role {
        switch self {
        case .keys(let keys): KeysDocument.Role(keys: keys, threshold: 1)
        case .document(let document): document.manifest
        }
    }

    /// The keys document version, when the anchor is one.
    package var keysVersion: Int? {
        if case .document(let document) = self { return document.version }
        return nil
    }

    package var document: KeysDocument? {
        if case .document(let document) = self { return document }
        return nil
    }

    /// How a message names it: "keys version 3" or "key 96193C766C1B8A21".
    package var summary: String {
        switch self {
        case .keys(let keys): (keys.count == 1 ? "key " : "keys ") + keys.map(\.keyID).joined(separator: ", ")
        case .document(let document): "keys version \(document.version)"
        }
    }
}
