import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("signing keys")
struct TrustSigningKeyTests {
    // Made by stock `minisign -G` 0.11 with the password "pw" (scrypt with 1 GiB of memory, too heavy to
    // make in every test run).
    static let stockEncryptedKey = """
        untrusted comment: minisign encrypted secret key
        RWRTY0IyLltIWgrHswMGEcdJLHX0tnRfba1eV5mA22G0i0dGjIIAAAACAAAAAAAAAEAAAAAA6Aa4pkWkAao+oj5WgetWgcjwQyYEjsyYpZxgaO70z2kyseQSqOfBPMG7VgEoKhPd2GKmxq++J7CfEQjifhuhPSND09jZGtezmY5AF0b+ePhLqoZ2CjfM1gPJiSPhgQtQWqQMckdRJuQ=

        """

    @Test("write(prefix:) writes a 0600 secret key and a public key that read back as the same key")
    func writeAndRead() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        try key.write(prefix: dir.path("release"))

        var info = stat()
        #expect(stat(dir.path("release.key"), &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        let reread = try SigningKey(contentsOfFile: dir.path("release.key"))
        #expect(reread.keyIDBytes == key.keyIDBytes)
        #expect(reread.seed == key.seed)
        #expect(try TrustedKey(contentsOfFile: dir.path("release.pub")) == key.publicKey)

        let publicText = String(decoding: try dir.read("release.pub"), as: UTF8.self)
        #expect(publicText == "untrusted comment: minisign public key \(key.keyID)\n\(key.publicKey.minisignPublicKey)\n")
    }

    @Test("the secret key file has minisign's layout: Ed, no kdf, B2, key ID, seed and public key, zero checksum")
    func secretKeyLayout() throws {
        let key = SigningKey.generate()
        let lines = MinisignFormat.lines(key.secretKeyFileContents)
        #expect(lines.count == 2)
        #expect(lines[0].starts(with: MinisignFormat.untrustedCommentPrefix))
        let record = try #require(Base64.decode(lines[1]))
        #expect(record.count == 158)
        #expect(Array(record[0..<6]) == Array("Ed".utf8) + [0, 0] + Array("B2".utf8))
        #expect(record[6..<54].allSatisfy { $0 == 0 })
        #expect(Array(record[54..<62]) == key.keyIDBytes)
        #expect(Array(record[62..<94]) == key.seed)
        #expect(Array(record[94..<126]) == key.publicKey.publicKeyBytes)
        #expect(record[126..<158].allSatisfy { $0 == 0 })
    }

    @Test("existing key files are not replaced unless asked")
    func noOverwrite() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let first = SigningKey.generate()
        try first.write(prefix: dir.path("k"))
        let message = trustInvalidArgumentMessage { try SigningKey.generate().write(prefix: dir.path("k")) }
        #expect(message == "\(dir.path("k.key")) already exists; remove it or choose another key prefix")
        #expect(try SigningKey(contentsOfFile: dir.path("k.key")).seed == first.seed)

        let second = SigningKey.generate()
        try second.write(prefix: dir.path("k"), overwrite: true)
        #expect(try SigningKey(contentsOfFile: dir.path("k.key")).seed == second.seed)
    }

    @Test("a password-protected stock key is refused with how to make a usable one")
    func encryptedKeyRefused() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let path = try dir.write(Array(Self.stockEncryptedKey.utf8), to: "encrypted.key")
        let message = trustInvalidArgumentMessage { _ = try SigningKey(contentsOfFile: path) }
        #expect(message?.hasPrefix("secret key \(path) is encrypted with a password") == true, "message: \(message ?? "none")")
        #expect(message?.contains("`offlinepkg keygen` or `minisign -G -W`") == true)
    }

    @Test(
        "damaged or foreign secret key files are refused",
        arguments: [
            ("seed", "does not match its private key"),
            ("public half", "does not match its private key"),
            ("kdf", "unsupported key derivation algorithm \"Xx\""),
            ("algorithm", "unsupported signature algorithm \"ED\""),
            ("checksum algorithm", "unsupported checksum algorithm"),
            ("public key file", "this looks like a public key"),
            ("one line", "expected 2 lines"),
            ("base64", "line 2 is not valid base64"),
        ])
    func damagedKeyRefused(damage: String, expected: String) throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        try key.write(prefix: dir.path("k"))
        var lines = MinisignFormat.lines(try dir.read("k.key"))
        var record = Base64.decode(lines[1])!
        switch damage {
        case "seed": record[62] ^= 0x01
        case "public half": record[125] ^= 0x01
        case "kdf": record.replaceSubrange(2..<4, with: Array("Xx".utf8))
        case "algorithm": record[1] = UInt8(ascii: "D")
        case "checksum algorithm": record[5] = UInt8(ascii: "3")
        case "public key file": lines = MinisignFormat.lines(try dir.read("k.pub"))
        case "one line": lines.removeFirst()
        case "base64": lines[1][0] = UInt8(ascii: "*")
        default: Issue.record("unknown damage \(damage)")
        }
        if !["public key file", "one line", "base64"].contains(damage) { lines[1] = Base64.encode(record) }
        let path = try dir.write(lines.flatMap { $0 + [UInt8(ascii: "\n")] }, to: "damaged.key")
        let message = trustInvalidArgumentMessage { _ = try SigningKey(contentsOfFile: path) }
        #expect(message?.hasPrefix("invalid minisign secret key file \(path): ") == true, "message: \(message ?? "none")")
        #expect(message?.contains(expected) == true, "message: \(message ?? "none")")
    }

    @Test(
        "trusted comments that minisign could not read back are refused",
        arguments: ["two\nlines", "cr\rhere", "nul\0byte", "8174 bytes"])
    func badTrustedComment(comment: String) {
        let comment = comment == "8174 bytes" ? String(repeating: "x", count: 8174) : comment
        let message = trustInvalidArgumentMessage { _ = try SigningKey.generate().sign([1, 2, 3], trustedComment: comment) }
        #expect(message?.hasPrefix("trusted comment ") == true, "message: \(message ?? "none")")
    }

    @Test("the longest trusted comment minisign reads still verifies with stock minisign")
    func longestTrustedComment() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        try key.write(prefix: dir.path("k"))
        let comment = String(repeating: "c", count: SigningKey.trustedCommentLimit - 1)
        try dir.write([42], to: "m")
        try dir.write(try key.sign([42], trustedComment: comment), to: "m.minisig")
        let output = try TrustMinisignTool.succeed(["-V", "-p", "k.pub", "-m", "m"], in: dir)
        #expect(output.contains(comment))
    }

    @Test("signatures are prehashed (ED) and carry the key ID")
    func signatureShape() throws {
        let key = SigningKey.generate()
        let signature = try MinisignSignature(parsing: try key.sign([1, 2, 3], trustedComment: "t"), source: "test")
        #expect(signature.algorithm == .prehashed)
        #expect(signature.keyID == key.keyID)
        #expect(signature.trustedComment == Array("t".utf8))
    }
}
