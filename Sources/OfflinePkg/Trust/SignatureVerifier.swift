/// Checks a minisign signature the way `minisign -V` does, against a set of trusted keys.
///
/// The order of the checks follows minisign: the file's shape, the algorithm, the key ID, the signature
/// over the message, then the global signature over the trusted comment. Each refusal says which check
/// failed, because "signature refused" alone leaves a publisher guessing between a stale key and a
/// corrupted upload.
package enum SignatureVerifier {
    /// Verifies `signature` (the bytes of a `.minisig` file) over `message`, and returns the trusted
    /// comment. Throws `OfflinePkgError.signatureRefused(source:reason:)` on any failure; `source` names
    /// what was signed (the manifest URL) in that error.
    package static func verify(message: [UInt8], signature: [UInt8], keys: [TrustedKey], source: String) throws -> String {
        let parsed = try MinisignSignature(parsing: signature, source: source)
        let candidates = keys.filter { $0.keyIDBytes == parsed.keyIDBytes }
        guard !candidates.isEmpty else {
            let trusted = keys.isEmpty ? "no key is trusted" : "trusted: " + keys.map(\.keyID).joined(separator: ", ")
            throw OfflinePkgError.signatureRefused(
                source: source, reason: "signed by key \(parsed.keyID), which is not trusted (\(trusted))")
        }
        let signedBytes = parsed.signedBytes(of: message)
        // Key IDs are random, not derived from the key: two trusted keys may share one, so try each.
        guard
            let key = candidates.first(where: {
                Ed25519.isValidSignature(parsed.signature, of: signedBytes, publicKey: $0.publicKeyBytes)
            })
        else {
            let form = parsed.algorithm == .prehashed ? "prehashed (ED)" : "legacy (Ed)"
            throw OfflinePkgError.signatureRefused(
                source: source,
                reason:
                    "wrong signature: the \(form) ed25519 signature does not match the \(message.count) signed bytes for key \(parsed.keyID)"
            )
        }
        guard Ed25519.isValidSignature(parsed.globalSignature, of: parsed.globallySignedBytes, publicKey: key.publicKeyBytes)
        else {
            throw OfflinePkgError.signatureRefused(
                source: source,
                reason:
                    "wrong trusted-comment signature: the global signature does not match the trusted comment for key \(parsed.keyID)"
            )
        }
        return String(decoding: parsed.trustedComment, as: UTF8.self)
    }
}
