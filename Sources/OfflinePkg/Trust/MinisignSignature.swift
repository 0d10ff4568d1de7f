/// A parsed `.minisig` file.
///
/// Four lines: `untrusted comment: <text>`; the base64 of 74 bytes (2-byte algorithm, 8-byte key ID,
/// 64-byte Ed25519 signature); `trusted comment: <text>`; the base64 of the 64-byte global signature over
/// the signature bytes followed by the trusted comment's bytes. Parsing checks the shape only; the
/// `SignatureVerifier` checks the cryptography.
///
/// A file is accepted exactly when stock `minisign -V` (0.11) accepts it as far as comment lengths go: the
/// comment lines are held to the buffers minisign reads them into (1022 and 8190 bytes before the `\n`).
/// offlinepkg is stricter than stock minisign only on bytes `minisign -S` never writes and that would let
/// two readers see different comments: a NUL or a lone CR in a line (0.11 cuts the trusted comment at
/// the CR and verifies only what comes before it), and anything after the fourth line.
package struct MinisignSignature: Sendable, Equatable {
    /// What the Ed25519 signature covers.
    package enum Algorithm: Sendable, Equatable {
        /// `ED`: the BLAKE2b-512 hash of the message (minisign's default since 0.10).
        case prehashed
        /// `Ed`: the raw message (`minisign -S -l`, and every minisign before 0.10).
        case legacy

        var bytes: [UInt8] {
            switch self {
            case .prehashed: MinisignFormat.prehashedAlgorithm
            case .legacy: MinisignFormat.legacyAlgorithm
            }
        }
    }

    package var untrustedComment: [UInt8]
    package var algorithm: Algorithm
    package var keyIDBytes: [UInt8]
    package var signature: [UInt8]
    /// The trusted comment's bytes, exactly as signed (without the prefix and the line ending).
    package var trustedComment: [UInt8]
    package var globalSignature: [UInt8]

    /// The key ID as minisign prints it.
    package var keyID: String { MinisignFormat.keyIDText(keyIDBytes) }

    /// A signature file is four short lines; refusing anything larger bounds the work an attacker controls.
    package static let sizeLimit = 64 << 10

    private static let recordLength = 2 + MinisignFormat.keyIDLength + MinisignFormat.signatureLength

    package init(
        untrustedComment: [UInt8], algorithm: Algorithm, keyIDBytes: [UInt8], signature: [UInt8],
        trustedComment: [UInt8], globalSignature: [UInt8]
    ) {
        self.untrustedComment = untrustedComment
        self.algorithm = algorithm
        self.keyIDBytes = keyIDBytes
        self.signature = signature
        self.trustedComment = trustedComment
        self.globalSignature = globalSignature
    }

    /// Parses a `.minisig` file; every refusal is a `.signatureRefused` for `source` whose reason starts
    /// with `malformed signature file` or `unknown signature algorithm`.
    package init(parsing bytes: [UInt8], source: String) throws {
        func malformed(_ reason: String) -> OfflinePkgError {
            .signatureRefused(source: source, reason: "malformed signature file: \(reason)")
        }
        guard bytes.count <= Self.sizeLimit else {
            throw malformed("\(bytes.count) bytes, more than the limit of \(Self.sizeLimit)")
        }
        if Self.looksLikeHTML(bytes) {
            throw malformed(
                "it is an HTML page, not a minisign signature: the server answered with a web page (an error, login or index page) where the .minisig file should be"
            )
        }
        let lines = MinisignFormat.lines(bytes)
        guard lines.count == 4 else {
            throw malformed(
                "expected 4 lines (untrusted comment, signature, trusted comment, global signature), got \(lines.count)")
        }
        for (index, line) in lines.enumerated() {
            // A NUL ends the line for minisign's C string handling, and a lone CR is not a line ending:
            // both would make two verifiers read the same file differently.
            if let bad = line.first(where: { $0 == 0 || $0 == UInt8(ascii: "\r") }) {
                throw malformed("line \(index + 1) contains the control byte 0x\(Hex.encode([bad]))")
            }
        }
        try MinisignFormat.requirePrefix(MinisignFormat.untrustedCommentPrefix, of: lines[0], number: 1, refuse: malformed)
        try MinisignFormat.requireStockLineLength(
            bytes, line: 1, bufferSize: MinisignFormat.commentBufferSize, what: "the untrusted comment", refuse: malformed)
        try MinisignFormat.requireStockLineLength(
            bytes, line: 3, bufferSize: MinisignFormat.trustedCommentBufferSize, what: "the trusted comment", refuse: malformed)
        guard let record = Base64.decode(lines[1]) else {
            throw malformed("line 2 is not valid base64: \(MinisignFormat.quoted(lines[1]))")
        }
        guard record.count == Self.recordLength else {
            throw malformed("line 2 should decode to \(Self.recordLength) bytes, got \(record.count)")
        }
        try MinisignFormat.requirePrefix(MinisignFormat.trustedCommentPrefix, of: lines[2], number: 3, refuse: malformed)
        guard let global = Base64.decode(lines[3]) else {
            throw malformed("line 4 is not valid base64: \(MinisignFormat.quoted(lines[3]))")
        }
        guard global.count == MinisignFormat.signatureLength else {
            throw malformed("line 4 should decode to \(MinisignFormat.signatureLength) bytes, got \(global.count)")
        }
        let algorithmBytes = Array(record[0..<2])
        let algorithm: Algorithm
        switch algorithmBytes {
        case MinisignFormat.prehashedAlgorithm: algorithm = .prehashed
        case MinisignFormat.legacyAlgorithm: algorithm = .legacy
        default:
            throw OfflinePkgError.signatureRefused(
                source: source,
                reason: "unknown signature algorithm \(MinisignFormat.quoted(algorithmBytes)), expected \"ED\" or \"Ed\"")
        }
        self.init(
            untrustedComment: Array(lines[0].dropFirst(MinisignFormat.untrustedCommentPrefix.count)),
            algorithm: algorithm,
            keyIDBytes: Array(record[2..<10]),
            signature: Array(record[10...]),
            trustedComment: Array(lines[2].dropFirst(MinisignFormat.trustedCommentPrefix.count)),
            globalSignature: global)
    }

    /// The file as minisign writes it: four lines, each ending in `\n`.
    package var fileContents: [UInt8] {
        var out = MinisignFormat.untrustedCommentPrefix + untrustedComment + [UInt8(ascii: "\n")]
        out += Base64.encode(algorithm.bytes + keyIDBytes + signature) + [UInt8(ascii: "\n")]
        out += MinisignFormat.trustedCommentPrefix + trustedComment + [UInt8(ascii: "\n")]
        out += Base64.encode(globalSignature) + [UInt8(ascii: "\n")]
        return out
    }

    /// The bytes the Ed25519 signature covers for `message` under this signature's algorithm.
    package func signedBytes(of message: [UInt8]) -> [UInt8] {
        switch algorithm {
        case .prehashed: BLAKE2b512.hash(message)
        case .legacy: message
        }
    }

    /// The bytes the global signature covers: the signature, then the trusted comment.
    package var globallySignedBytes: [UInt8] { signature + trustedComment }
}

extension MinisignSignature {
    /// Whether `bytes` start, after blanks, like an HTML document (`<!doctype`, `<html`, or any tag): a
    /// minisign file starts with `untrusted comment:`, so a `<` there is a web page served in its place.
    static func looksLikeHTML(_ bytes: [UInt8]) -> Bool {
        let start = bytes.drop { $0 == 0x20 || $0 == 0x09 || $0 == 0x0a || $0 == 0x0d || $0 == 0xef || $0 == 0xbb || $0 == 0xbf }
        return start.first == UInt8(ascii: "<")
    }
}
