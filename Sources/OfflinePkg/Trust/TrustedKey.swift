/// A minisign public key that a device trusts to sign manifests.
///
/// It reads both forms minisign hands out: the whole file `minisign -G` writes
/// (`untrusted comment: minisign public key <ID>` then the base64 line), or the base64 line alone, as
/// printed after `-P`. The base64 holds 42 bytes: the algorithm `Ed`, the 8-byte key ID, and the
/// 32-byte Ed25519 public key.
public struct TrustedKey: Sendable, Equatable {
    /// The key ID bytes as stored in keys and signatures.
    package let keyIDBytes: [UInt8]
    /// The raw 32-byte Ed25519 public key.
    package let publicKeyBytes: [UInt8]

    /// The key ID as minisign prints it: 16 upper-case hex digits, e.g. `96193C766C1B8A21`.
    public var keyID: String { MinisignFormat.keyIDText(keyIDBytes) }

    /// The base64 line of the key, as `minisign -P` takes it.
    public var minisignPublicKey: String {
        String(decoding: Base64.encode(MinisignFormat.legacyAlgorithm + keyIDBytes + publicKeyBytes), as: UTF8.self)
    }

    /// The key file as `minisign -G` writes it.
    package var fileContents: [UInt8] {
        Array("untrusted comment: minisign public key \(keyID)\n\(minisignPublicKey)\n".utf8)
    }

    package init(keyIDBytes: [UInt8], publicKeyBytes: [UInt8]) {
        precondition(keyIDBytes.count == MinisignFormat.keyIDLength && publicKeyBytes.count == MinisignFormat.publicKeyLength)
        self.keyIDBytes = keyIDBytes
        self.publicKeyBytes = publicKeyBytes
    }

    /// Parses a minisign public key: the file `minisign -G` writes, or just its base64 line.
    /// Throws `OfflinePkgError.invalidArgument` when the text is neither.
    public init(minisignPublicKey text: String) throws {
        try self.init(parsing: Array(text.utf8), source: "minisign public key")
    }

    /// Reads a minisign public key file (or a file holding just the base64 line).
    public init(contentsOfFile path: String) throws {
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.read(path, limit: Self.fileSizeLimit)
        } catch OfflinePkgError.sizeMismatch {
            throw OfflinePkgError.invalidArgument(
                "invalid minisign public key file \(path): larger than \(Self.fileSizeLimit) bytes")
        }
        try self.init(parsing: bytes, source: "minisign public key file \(path)")
    }

    /// A key file is two short lines; anything near this size is the wrong file.
    package static let fileSizeLimit = 64 << 10

    private init(parsing bytes: [UInt8], source: String) throws {
        func refuse(_ reason: String) -> OfflinePkgError {
            .invalidArgument("invalid \(source): \(reason)")
        }
        // Pasted keys often come with surrounding blank lines or spaces; they carry no meaning.
        let trimmed = bytes.drop { Self.isSpace($0) }.reversed().drop { Self.isSpace($0) }.reversed()
        let lines = MinisignFormat.lines(trimmed)
        let base64Line: [UInt8]
        switch lines.count {
        case 1:
            base64Line = lines[0]
        case 2:
            try MinisignFormat.requirePrefix(MinisignFormat.untrustedCommentPrefix, of: lines[0], number: 1, refuse: refuse)
            try MinisignFormat.requireStockLineLength(
                trimmed, line: 1, bufferSize: MinisignFormat.commentBufferSize, what: "the comment", refuse: refuse)
            base64Line = lines[1]
        default:
            throw refuse(
                "expected the base64 key line, optionally after an \"untrusted comment: \" line; got \(lines.count) lines")
        }
        guard let decoded = Base64.decode(base64Line) else {
            throw refuse("the key line is not valid base64: \(MinisignFormat.quoted(base64Line))")
        }
        let expectedLength = 2 + MinisignFormat.keyIDLength + MinisignFormat.publicKeyLength
        guard decoded.count == expectedLength else {
            let hint = decoded.count == MinisignFormat.secretKeyRecordLength ? " (this looks like a secret key: pass the .pub file)" : ""
            throw refuse("the key line should decode to \(expectedLength) bytes, got \(decoded.count)\(hint)")
        }
        guard Array(decoded[0..<2]) == MinisignFormat.legacyAlgorithm else {
            throw refuse("unsupported key algorithm \(MinisignFormat.quoted(decoded[0..<2])), expected \"Ed\"")
        }
        self.init(keyIDBytes: Array(decoded[2..<10]), publicKeyBytes: Array(decoded[10...]))
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
    }
}

extension TrustedKey: CustomStringConvertible {
    /// The key ID, which is how minisign names a key.
    public var description: String { "minisign key \(keyID)" }
}
