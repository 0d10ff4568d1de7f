import OfflinePkg

/// The secret key file, in minisign's format (`SeckeyStruct` in minisign.h), unencrypted.
///
/// Its base64 line holds 158 bytes:
///
/// | bytes | field |
/// |---|---|
/// | 2 | signature algorithm, `Ed` |
/// | 2 | key derivation algorithm: `Sc` (scrypt, password-encrypted) or two zero bytes (unencrypted) |
/// | 2 | checksum algorithm, `B2` |
/// | 32 + 8 + 8 | scrypt salt, opslimit, memlimit (unused without a password) |
/// | 8 | key ID |
/// | 64 | libsodium secret key: the Ed25519 seed, then the public key |
/// | 32 | checksum |
///
/// offlinepkg signs unattended (`publish` from CI), so it only reads keys without a password, exactly the
/// ones `minisign -G -W` writes.
extension SigningKey {
    static let fileRecordLength = MinisignFormat.secretKeyRecordLength

    private static let keyDerivationOffset = 2
    private static let checksumAlgorithmOffset = 4
    private static let keyIDOffset = 54
    private static let secretKeyOffset = 62
    private static let unencrypted: [UInt8] = [0, 0]
    private static let scrypt: [UInt8] = Array("Sc".utf8)
    private static let checksumAlgorithm: [UInt8] = Array("B2".utf8)

    /// Reads a minisign secret key file without a password, as `offlinepkg keygen` or `minisign -G -W`
    /// writes it. Throws `OfflinePkgError.invalidArgument` for anything else, an encrypted key included.
    package init(contentsOfFile path: String) throws {
        func refuse(_ reason: String) -> OfflinePkgError {
            .invalidArgument("invalid minisign secret key file \(path): \(reason)")
        }
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.read(path, limit: TrustedKey.fileSizeLimit)
        } catch OfflinePkgError.sizeMismatch {
            throw refuse("larger than \(TrustedKey.fileSizeLimit) bytes")
        }
        let lines = MinisignFormat.lines(bytes)
        guard lines.count == 2 else {
            throw refuse("expected 2 lines (untrusted comment, key), got \(lines.count)")
        }
        try MinisignFormat.requirePrefix(MinisignFormat.untrustedCommentPrefix, of: lines[0], number: 1, refuse: refuse)
        try MinisignFormat.requireStockLineLength(
            bytes, line: 1, bufferSize: MinisignFormat.commentBufferSize, what: "the comment", refuse: refuse)
        guard let record = Base64.decode(lines[1]) else {
            throw refuse("line 2 is not valid base64")
        }
        guard record.count == Self.fileRecordLength else {
            let hint = record.count == 42 ? " (this looks like a public key: pass the .key file)" : ""
            throw refuse("line 2 should decode to \(Self.fileRecordLength) bytes, got \(record.count)\(hint)")
        }
        guard Array(record[0..<2]) == MinisignFormat.legacyAlgorithm else {
            throw refuse("unsupported signature algorithm \(MinisignFormat.quoted(record[0..<2])), expected \"Ed\"")
        }
        guard Array(record[Self.checksumAlgorithmOffset..<Self.checksumAlgorithmOffset + 2]) == Self.checksumAlgorithm else {
            throw refuse("unsupported checksum algorithm, expected \"B2\"")
        }
        let keyDerivation = Array(record[Self.keyDerivationOffset..<Self.keyDerivationOffset + 2])
        if keyDerivation == Self.scrypt {
            throw OfflinePkgError.invalidArgument(
                "secret key \(path) is encrypted with a password, which offlinepkg cannot ask for: "
                    + "create the key with `offlinepkg keygen` or `minisign -G -W`, "
                    + "or remove its password with `minisign -C -W -s \(path)`")
        }
        guard keyDerivation == Self.unencrypted else {
            throw refuse("unsupported key derivation algorithm \(MinisignFormat.quoted(keyDerivation))")
        }
        let keyID = Array(record[Self.keyIDOffset..<Self.secretKeyOffset])
        let seed = Array(record[Self.secretKeyOffset..<Self.secretKeyOffset + Ed25519.seedLength])
        let storedPublicKey = Array(record[Self.secretKeyOffset + Ed25519.seedLength..<Self.secretKeyOffset + 64])
        // minisign -G -W leaves the checksum zero and minisign never checks it without a password, and
        // OpenSSL 3.0 has no BLAKE2b-256 to check it with. Deriving the public key from the seed catches
        // the same damage: a changed seed or public half no longer agree.
        let key = SigningKey(keyIDBytes: keyID, seed: seed)
        guard key.publicKey.publicKeyBytes == storedPublicKey else {
            throw refuse("the public key stored in it does not match its private key; the file is damaged")
        }
        self = key
    }

    /// The secret key file's contents, laid out as `minisign -G -W` writes it.
    package var secretKeyFileContents: [UInt8] {
        var record = [UInt8](repeating: 0, count: Self.fileRecordLength)
        record.replaceSubrange(0..<2, with: MinisignFormat.legacyAlgorithm)
        record.replaceSubrange(Self.keyDerivationOffset..<Self.keyDerivationOffset + 2, with: Self.unencrypted)
        record.replaceSubrange(Self.checksumAlgorithmOffset..<Self.checksumAlgorithmOffset + 2, with: Self.checksumAlgorithm)
        record.replaceSubrange(Self.keyIDOffset..<Self.secretKeyOffset, with: keyIDBytes)
        record.replaceSubrange(Self.secretKeyOffset..<Self.secretKeyOffset + 64, with: seed + publicKey.publicKeyBytes)
        // The checksum stays zero, as minisign -G -W leaves it (see init(contentsOfFile:)).
        return Array("untrusted comment: offlinepkg secret key \(keyID), unencrypted\n".utf8) + Base64.encode(record) + [
            UInt8(ascii: "\n")
        ]
    }

    /// Writes `<prefix>.key` (mode 0600) and `<prefix>.pub`, the pair `minisign -G -W -s <prefix>.key
    /// -p <prefix>.pub` would write. Refuses to replace an existing file unless `overwrite` is set,
    /// since a replaced secret key is lost for good.
    package func write(prefix: String, overwrite: Bool = false) throws {
        let secretPath = prefix + ".key"
        let publicPath = prefix + ".pub"
        if !overwrite {
            for path in [secretPath, publicPath] where FileSystem.exists(path) {
                throw OfflinePkgError.invalidArgument("\(path) already exists; remove it or choose another key prefix")
            }
        }
        try FileSystem.writeAtomically(secretKeyFileContents, to: secretPath, mode: 0o600)
        try FileSystem.writeAtomically(publicKey.fileContents, to: publicPath, mode: 0o644)
    }
}
