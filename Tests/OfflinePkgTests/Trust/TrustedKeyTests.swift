import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("trusted keys")
struct TrustedKeyTests {
    // Made by stock `minisign -G -W` 0.11, which printed the key ID in the comment line.
    static let stockFile = """
        untrusted comment: minisign public key 96193C766C1B8A21
        RWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw

        """

    @Test("the key ID reads as minisign prints it: the 8 bytes little-endian, upper-case hex")
    func keyIDAsMinisignPrintsIt() throws {
        let key = try TrustedKey(minisignPublicKey: Self.stockFile)
        #expect(key.keyID == "96193C766C1B8A21")
        #expect(key.keyIDBytes == [0x21, 0x8a, 0x1b, 0x6c, 0x76, 0x3c, 0x19, 0x96])
        #expect(String(decoding: key.fileContents, as: UTF8.self) == Self.stockFile)
        #expect("\(key)" == "minisign key 96193C766C1B8A21")
    }

    @Test(
        "the base64 line alone, with CRLF, or with surrounding whitespace, parses to the same key",
        arguments: [
            "RWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw",
            "  RWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw\n\n",
            "untrusted comment: minisign public key 96193C766C1B8A21\r\nRWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw\r\n",
            "untrusted comment: renamed\nRWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw",
        ])
    func acceptedForms(text: String) throws {
        #expect(try TrustedKey(minisignPublicKey: text) == TrustedKey(minisignPublicKey: Self.stockFile))
    }

    @Test(
        "malformed public keys are refused with what is wrong",
        arguments: [
            ("", "got 0 lines"),
            ("RWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Q", "not valid base64"),
            ("RWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Q!", "not valid base64"),
            ("RWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxn", "should decode to 42 bytes, got 39"),
            ("RURhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw", "unsupported key algorithm \"ED\""),
            (
                "comment\nRWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw",
                "line 1 should start with \"untrusted comment: \""
            ),
            ("untrusted comment: a\nRWQhihtsdjwZlgFqt0UNszMCp6QqBOgz0U2XgBE3wNvukRIrsvxnS5Qw\nmore", "got 3 lines"),
        ])
    func refused(text: String, expected: String) {
        let message = trustInvalidArgumentMessage { _ = try TrustedKey(minisignPublicKey: text) }
        #expect(message?.hasPrefix("invalid minisign public key: ") == true)
        #expect(message?.contains(expected) == true, "message: \(message ?? "none")")
    }

    @Test("a secret key file given as a public key gets a hint")
    func secretKeyGivenAsPublic() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try SigningKey.generate().write(prefix: dir.path("k"))
        let message = trustInvalidArgumentMessage { _ = try TrustedKey(contentsOfFile: dir.path("k.key")) }
        #expect(message?.contains("invalid minisign public key file \(dir.path("k.key")):") == true)
        #expect(message?.contains("this looks like a secret key") == true, "message: \(message ?? "none")")
    }

    @Test("a missing key file is an i/o error, an oversized one is refused")
    func fileErrors() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        #expect {
            _ = try TrustedKey(contentsOfFile: dir.path("missing.pub"))
        } throws: { error in
            if case OfflinePkgError.io(let path, _, _) = error { path == dir.path("missing.pub") } else { false }
        }
        try dir.write([UInt8](repeating: UInt8(ascii: "A"), count: TrustedKey.fileSizeLimit + 1), to: "big.pub")
        let message = trustInvalidArgumentMessage { _ = try TrustedKey(contentsOfFile: dir.path("big.pub")) }
        #expect(message?.hasSuffix("larger than 65536 bytes") == true, "message: \(message ?? "none")")
    }

    @Test("strict base64: round trips, refuses what libsodium's decoder would not produce", arguments: 0..<8)
    func base64(length: Int) {
        let bytes = SecureRandom.bytes(length * 7)
        let text = Base64.encode(bytes)
        #expect(Base64.decode(text) == bytes)
        #expect(text.count % 4 == 0)
        if !text.isEmpty {
            #expect(Base64.decode(text.dropLast()) == nil)
            #expect(Base64.decode(text + Array(" ".utf8)) == nil)
        }
    }

    @Test("base64 matches known vectors")
    func base64Vectors() {
        let vectors = [
            ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in vectors {
            #expect(Base64.encode(Array(plain.utf8)) == Array(encoded.utf8))
            #expect(Base64.decode(Array(encoded.utf8)) == Array(plain.utf8))
        }
        #expect(Base64.decode(Array("Zh==".utf8)) == nil)  // non-zero unused bits
        #expect(Base64.decode(Array("Zm9=".utf8)) == nil)
        #expect(Base64.decode(Array("Z===".utf8)) == nil)
        #expect(Base64.decode(Array("Zg=a".utf8)) == nil)
        #expect(Base64.decode(Array("Zg==Zg==".utf8)) == nil)  // padding only at the end
    }

    @Test("blake2b-512 matches RFC 7693's vector")
    func blake2b() {
        #expect(
            Hex.encode(BLAKE2b512.hash(Array("abc".utf8)))
                == "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
        )
        #expect(Hex.encode(BLAKE2b512.hash([])).hasPrefix("786a02f742015903c6c6fd852552d272"))
    }
}
