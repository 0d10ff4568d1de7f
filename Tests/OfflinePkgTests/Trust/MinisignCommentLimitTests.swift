import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// offlinepkg and stock `minisign -V` (Debian's 0.11) accept exactly the same comment lengths: minisign
/// reads the untrusted comment line into a 1024-byte buffer and the trusted one into 8192 bytes with
/// `fgets`, and refuses a line that does not fit. Every file here carries valid
/// signatures over its comments, so a refusal can only come from the length.
@Suite("minisign comment limits")
struct MinisignCommentLimitTests {
    /// A `.minisig` over `message` whose comments are `untrusted` and `trusted` bytes of "c" and "t",
    /// each line ended by `ending`.
    static func signatureFile(key: SigningKey, message: [UInt8], untrusted: Int, trusted: Int, ending: String) -> [UInt8] {
        var signature = MinisignSignature(
            untrustedComment: [UInt8](repeating: UInt8(ascii: "c"), count: untrusted), algorithm: .prehashed,
            keyIDBytes: key.keyIDBytes, signature: [], trustedComment: [UInt8](repeating: UInt8(ascii: "t"), count: trusted),
            globalSignature: [])
        signature.signature = Ed25519.signature(of: signature.signedBytes(of: message), seed: key.seed)
        signature.globalSignature = Ed25519.signature(of: signature.globallySignedBytes, seed: key.seed)
        let text = String(decoding: signature.fileContents, as: UTF8.self)
        return Array(text.replacingOccurrences(of: "\n", with: ending).utf8)
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var untrusted: Int
        var trusted: Int
        var ending: String
        var accepted: Bool
        var testDescription: String {
            "untrusted \(untrusted), trusted \(trusted)\(ending == "\r\n" ? ", CRLF" : ""): \(accepted ? "accepted" : "refused")"
        }
    }

    // "untrusted comment: " is 19 bytes and "trusted comment: " 17; a line may hold 1022 and 8190 bytes
    // before its "\n", a CRLF's "\r" included.
    static let cases: [Case] = [
        .init(untrusted: 1003, trusted: 10, ending: "\n", accepted: true),
        .init(untrusted: 1004, trusted: 10, ending: "\n", accepted: false),
        .init(untrusted: 1002, trusted: 10, ending: "\r\n", accepted: true),
        .init(untrusted: 1003, trusted: 10, ending: "\r\n", accepted: false),
        .init(untrusted: 3000, trusted: 10, ending: "\n", accepted: false),
        .init(untrusted: 10, trusted: 8173, ending: "\n", accepted: true),
        .init(untrusted: 10, trusted: 8174, ending: "\n", accepted: false),
        .init(untrusted: 10, trusted: 8172, ending: "\r\n", accepted: true),
        .init(untrusted: 10, trusted: 8173, ending: "\r\n", accepted: false),
        .init(untrusted: 10, trusted: 8192, ending: "\n", accepted: false),
        .init(untrusted: 10, trusted: 12_000, ending: "\n", accepted: false),
        .init(untrusted: 10, trusted: 60_000, ending: "\n", accepted: false),
        .init(untrusted: 1003, trusted: 8173, ending: "\n", accepted: true),
    ]

    @Test(arguments: cases)
    func offlinepkgAndStockMinisignAgree(_ limit: Case) throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        try key.write(prefix: dir.path("k"))
        let message: [UInt8] = Array("manifest".utf8)
        try dir.write(message, to: "m")
        let file = Self.signatureFile(key: key, message: message, untrusted: limit.untrusted, trusted: limit.trusted, ending: limit.ending)
        try dir.write(file, to: "m.minisig")

        let stock = try TrustMinisignTool.run(["-V", "-q", "-p", "k.pub", "-m", "m"], in: dir)
        #expect((stock.status == 0) == limit.accepted, "minisign -V: \(stock.status) \(stock.output)")
        let reason = trustRefusalReason {
            _ = try SignatureVerifier.verify(message: message, signature: file, keys: [key.publicKey], source: "test-source")
        }
        if limit.accepted {
            #expect(reason == nil)
        } else {
            let what = limit.untrusted > 1000 ? "the untrusted comment (line 1)" : "the trusted comment (line 3)"
            #expect(reason?.hasPrefix("malformed signature file: \(what) is ") == true, "\(reason ?? "accepted")")
            #expect(reason?.contains("stock minisign reads at most") == true)
        }
    }

    /// What stock `minisign -S` writes itself: `-t` up to 4077 bytes (its `xfprintf` buffer is 4096), and a
    /// `-c` of 1004 bytes that it writes with a warning but its own `-V` refuses; offlinepkg agrees on each.
    @Test(arguments: [("-t", 4077, true), ("-c", 1003, true), ("-c", 1004, false)])
    func stockSignaturesAgree(_ option: String, _ length: Int, _ accepted: Bool) throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try TrustMinisignTool.generateKeyPair("k", in: dir)
        try dir.write(Array("manifest".utf8), to: "m")
        try TrustMinisignTool.succeed(["-S", "-s", "k.key", "-m", "m", option, String(repeating: "x", count: length)], in: dir)
        let stock = try TrustMinisignTool.run(["-V", "-q", "-p", "k.pub", "-m", "m"], in: dir)
        #expect((stock.status == 0) == accepted, "minisign -V: \(stock.output)")
        let key = try TrustedKey(contentsOfFile: dir.path("k.pub"))
        let reason = trustRefusalReason {
            _ = try SignatureVerifier.verify(
                message: try dir.read("m"), signature: try dir.read("m.minisig"), keys: [key], source: "test-source")
        }
        #expect((reason == nil) == accepted, "\(reason ?? "accepted")")
    }

    /// A public key file's comment line: stock minisign reads it into 1024 bytes and takes what does not
    /// fit as the key line, so a longer one is refused by both.
    @Test(arguments: [(1022, true), (1023, false), (3000, false)])
    func keyFileCommentLine(_ length: Int, _ accepted: Bool) throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        let message: [UInt8] = Array("manifest".utf8)
        try dir.write(message, to: "m")
        try dir.write(try key.sign(message, trustedComment: "t"), to: "m.minisig")
        let prefix = "untrusted comment: "
        let comment = prefix + String(repeating: "k", count: length - prefix.utf8.count)
        try dir.write(Array("\(comment)\n\(key.publicKey.minisignPublicKey)\n".utf8), to: "k.pub")

        let stock = try TrustMinisignTool.run(["-V", "-q", "-p", "k.pub", "-m", "m"], in: dir)
        #expect((stock.status == 0) == accepted, "minisign -V: \(stock.output)")
        do {
            let parsed = try TrustedKey(contentsOfFile: dir.path("k.pub"))
            #expect(accepted && parsed == key.publicKey)
        } catch OfflinePkgError.invalidArgument(let message) {
            #expect(!accepted, "\(message)")
            #expect(message.contains("the comment (line 1) is \(length) bytes; stock minisign reads at most 1022"))
        }
    }

    /// The secret key file's comment line follows the same limit (minisign -S reads it the same way).
    @Test func secretKeyFileCommentLine() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try SigningKey.generate().write(prefix: dir.path("k"))
        var lines = String(decoding: try dir.read("k.key"), as: UTF8.self).split(separator: "\n").map(String.init)
        lines[0] = "untrusted comment: " + String(repeating: "s", count: 1004)
        try dir.write(Array((lines.joined(separator: "\n") + "\n").utf8), to: "k.key")
        let message = trustInvalidArgumentMessage { _ = try SigningKey(contentsOfFile: dir.path("k.key")) }
        #expect(message?.contains("the comment (line 1) is 1023 bytes; stock minisign reads at most 1022") == true, "\(message ?? "")")
    }
}
