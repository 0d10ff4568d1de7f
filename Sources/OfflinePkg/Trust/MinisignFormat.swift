/// The pieces of minisign's text formats that public keys, secret keys and signatures share.
///
/// Every minisign file is a handful of lines: an `untrusted comment: ` line, a base64 line holding a
/// fixed-size binary record, and for signatures a `trusted comment: ` line and a second base64 line.
/// Layouts follow jedisct1/minisign (src/minisign.h), checked against the stock 0.11 tool.
package enum MinisignFormat {
    package static let untrustedCommentPrefix = Array("untrusted comment: ".utf8)
    package static let trustedCommentPrefix = Array("trusted comment: ".utf8)

    /// Signature algorithm of keys, and of legacy signatures over the raw message.
    package static let legacyAlgorithm: [UInt8] = Array("Ed".utf8)
    /// Signature algorithm of signatures over the BLAKE2b-512 hash of the message (minisign's default).
    package static let prehashedAlgorithm: [UInt8] = Array("ED".utf8)

    package static let keyIDLength = 8
    package static let publicKeyLength = 32
    package static let signatureLength = 64
    /// The binary record of a secret key file (`SeckeyStruct`): read by the publisher's `SigningKey`,
    /// and named here so a device can tell a secret key handed to it by mistake.
    package static let secretKeyRecordLength = 158

    /// minisign's `COMMENTMAXBYTES`: stock minisign (0.11, src/minisign.c) reads the first line of
    /// signatures and key files with `fgets` into a buffer of this size.
    package static let commentBufferSize = 1024
    /// minisign's `TRUSTEDCOMMENTMAXBYTES`, the buffer the trusted comment line is read into.
    package static let trustedCommentBufferSize = 8192

    /// The longest line, counted before its `\n` (the `\r` of a CRLF ending included), that `fgets` reads
    /// whole into a buffer of `size`: one byte goes to the `\n`, one to the terminating NUL. minisign -V
    /// refuses a signature whose comment line does not fit ("comment too long"), and reads the rest of a
    /// longer key-file comment as the key line, so offlinepkg refuses the same lines.
    package static func longestLine(inBuffer size: Int) -> Int { size - 2 }

    /// Refuses line `number` (from 1) of `bytes` when it is longer than `fgets` reads whole into a
    /// buffer of `bufferSize`; `what` names the line in the message.
    package static func requireStockLineLength(
        _ bytes: some Collection<UInt8>, line number: Int, bufferSize: Int, what: String, refuse: (String) -> OfflinePkgError
    ) throws {
        let raw = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: number, omittingEmptySubsequences: false)
        guard raw.count >= number else { return }
        let length = raw[number - 1].count
        let limit = longestLine(inBuffer: bufferSize)
        guard length <= limit else {
            throw refuse(
                "\(what) (line \(number)) is \(length) bytes; stock minisign reads at most \(limit) bytes of it "
                    + "(a \(bufferSize)-byte buffer) and refuses the file")
        }
    }

    /// Splits a small text file into lines without their `\n` or `\r\n` ending. A missing final newline is
    /// fine; an empty line anywhere else is kept, so that callers can refuse it.
    package static func lines(_ bytes: some Collection<UInt8>) -> [[UInt8]] {
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            line.last == UInt8(ascii: "\r") ? Array(line.dropLast()) : Array(line)
        }
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines
    }

    /// The key ID as minisign prints it: the 8 bytes read as a little-endian integer, 16 upper-case hex
    /// digits (`%016" PRIX64` of `le64_load(keynum)`), so the bytes appear reversed.
    package static func keyIDText(_ keyID: [UInt8]) -> String {
        Hex.encode(keyID.reversed()).uppercased()
    }

    /// Checks that line `number` (from 1) starts with `prefix`; otherwise throws `refuse` with why.
    package static func requirePrefix(
        _ prefix: [UInt8], of line: [UInt8], number: Int, refuse: (String) -> OfflinePkgError
    ) throws {
        guard line.starts(with: prefix) else {
            throw refuse("line \(number) should start with \"\(String(decoding: prefix, as: UTF8.self))\", got \(quoted(line))")
        }
    }

    /// A line for messages: printable ASCII as is, anything else escaped, cut at 40 bytes.
    package static func quoted(_ bytes: some Collection<UInt8>) -> String {
        var text = ""
        for byte in bytes.prefix(40) {
            if (0x20...0x7e).contains(byte) && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + Hex.encode([byte])
            }
        }
        return "\"" + text + (bytes.count > 40 ? "…" : "") + "\""
    }
}
