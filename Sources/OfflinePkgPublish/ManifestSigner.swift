import FoundationEssentials
import OfflinePkg

/// Who signs a manifest (docs/protocol.md#signatures, docs/protocol.md#keys-documents): the secret keys
/// given (`--sign-key`, in order), under the repository's newest keys document when it has one. Made once
/// the repository is locked and before anything takes a published name, so that a threshold not met writes
/// nothing.
package struct ManifestSigner: Sendable {
    package let keys: [SigningKey]
    /// The newest keys document, a threshold of whose manifest keys must sign; nil without `keys/`.
    package let document: KeysDocument?
    /// When the signatures are made: their trusted comment's timestamp.
    private let now: Date

    /// Checks `keys` against the repository's keys documents, if it has any: every key must be a manifest
    /// key of the newest version, a threshold of them must be given, and that version must not have
    /// expired (devices would refuse every manifest under it).
    package init(keys: [SigningKey], repository layout: RepositoryLayout, now: Date) throws {
        try self.init(keys: keys, document: try RepositoryKeys.load(layout).latest, now: now)
    }

    /// The same check against `document`, the newest keys version the repository will hold.
    package init(keys: [SigningKey], document: KeysDocument?, now: Date) throws {
        var distinct = [SigningKey]()
        for key in keys where !distinct.contains(where: { $0.publicKey == key.publicKey }) { distinct.append(key) }
        self.keys = distinct
        self.document = document
        self.now = now
        guard let document else { return }
        let role = document.manifest
        let ids = role.keyIDs.joined(separator: ", ")
        guard !distinct.isEmpty else {
            throw OfflinePkgError.publishRefused(
                reason:
                    "the repository has keys documents (keys/1.json to keys/\(document.version).json) and devices that trust them refuse an unsigned manifest: pass --sign-key for \(role.threshold) of keys version \(document.version)'s manifest keys (\(ids))"
            )
        }
        for key in distinct where !role.contains(key.publicKey) {
            throw OfflinePkgError.publishRefused(
                reason:
                    "--sign-key \(key.keyID) is not a manifest key of keys version \(document.version) (its manifest keys: \(ids)); a key that a rotation removed signs nothing devices accept"
            )
        }
        guard distinct.count >= role.threshold else {
            let missing = role.keys.filter { key in !distinct.contains { $0.publicKey == key } }.map(\.keyID)
            throw OfflinePkgError.publishRefused(
                reason:
                    "keys version \(document.version) needs \(role.threshold) signatures of its manifest keys (\(ids)); given: \(distinct.map(\.keyID).joined(separator: ", ")); missing \(role.threshold - distinct.count) of: \(missing.joined(separator: ", ")). Pass one --sign-key for each; nothing was written"
            )
        }
        if document.hasExpired(at: now) {
            throw OfflinePkgError.publishRefused(
                reason:
                    "keys version \(document.version) expired at \(RFC3339.format(document.expires!)), and devices refuse manifests under it: renew it with `offlinepkg keys rotate` (root keys) first"
            )
        }
    }

    /// The keys version the manifest names (`"keys"`), when the repository has keys documents.
    package var keysVersion: Int? { document?.version }

    /// The signature files of manifest `bytes`, one per key in order: the first is also
    /// `manifest.json.minisig` (a single stock-minisign key verifies it).
    package func sign(_ bytes: [UInt8]) throws -> [(keyID: String, bytes: [UInt8])] {
        try keys.map { key in
            // minisign's own default trusted comment shape.
            (key.keyID, try key.sign(bytes, trustedComment: "timestamp:\(Int(now.timeIntervalSince1970))\tfile:manifest.json"))
        }
    }
}
