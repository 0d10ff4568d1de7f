import OfflinePkg

/// A minisign secret key that signs manifests: made by `offlinepkg keygen`, or by `minisign -G -W`.
///
/// Signatures use minisign's default prehashed `ED` algorithm, so the stock `minisign -V` accepts them,
/// and so does `SignatureVerifier` with `publicKey` trusted.
package struct SigningKey: Sendable {
    /// The 8-byte key ID, shared by the public key and every signature.
    package let keyIDBytes: [UInt8]
    /// The 32-byte Ed25519 seed: the private key proper. libsodium's 64-byte secret key is the seed
    /// followed by the public key.
    package let seed: [UInt8]

    /// The public half, to hand to devices (`--trust-key`).
    package let publicKey: TrustedKey

    /// The key ID as minisign prints it.
    package var keyID: String { publicKey.keyID }

    package init(keyIDBytes: [UInt8], seed: [UInt8]) {
        precondition(keyIDBytes.count == MinisignFormat.keyIDLength && seed.count == Ed25519.seedLength)
        self.keyIDBytes = keyIDBytes
        self.seed = seed
        self.publicKey = TrustedKey(keyIDBytes: keyIDBytes, publicKeyBytes: Ed25519.publicKey(seed: seed))
    }

    /// A new key pair with a random key ID, as `minisign -G` makes one.
    package static func generate() -> SigningKey {
        let pair = Ed25519.generateKeyPair()
        return SigningKey(keyIDBytes: SecureRandom.bytes(MinisignFormat.keyIDLength), seed: pair.seed)
    }

    /// minisign's limit on the trusted comment (`TRUSTEDCOMMENTMAXBYTES - sizeof TRUSTED_COMMENT_PREFIX`,
    /// exclusive): a longer one would not fit the buffer `minisign -V` reads the line into.
    package static let trustedCommentLimit =
        MinisignFormat.longestLine(inBuffer: MinisignFormat.trustedCommentBufferSize) - MinisignFormat.trustedCommentPrefix.count + 1

    /// Signs `message` and returns the `.minisig` file: prehashed (`ED`), with `trustedComment` signed too.
    ///
    /// Throws `OfflinePkgError.invalidArgument` when the trusted comment cannot be written on one line that
    /// minisign reads back: it holds a line break or a NUL, or is longer than 8173 bytes.
    package func sign(_ message: [UInt8], trustedComment: String) throws -> [UInt8] {
        let comment = Array(trustedComment.utf8)
        if comment.contains(where: { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") || $0 == 0 }) {
            throw OfflinePkgError.invalidArgument(
                "trusted comment \(MinisignFormat.quoted(comment)) must be one line without nul bytes")
        }
        guard comment.count < Self.trustedCommentLimit else {
            throw OfflinePkgError.invalidArgument(
                "trusted comment is \(comment.count) bytes; minisign reads at most \(Self.trustedCommentLimit - 1)")
        }
        var signature = MinisignSignature(
            untrustedComment: Array("signature from offlinepkg secret key \(keyID)".utf8),
            algorithm: .prehashed,
            keyIDBytes: keyIDBytes,
            signature: [],
            trustedComment: comment,
            globalSignature: [])
        signature.signature = Ed25519.signature(of: signature.signedBytes(of: message), seed: seed)
        signature.globalSignature = Ed25519.signature(of: signature.globallySignedBytes, seed: seed)
        return signature.fileContents
    }
}
