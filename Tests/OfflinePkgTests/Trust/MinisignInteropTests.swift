import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// Interoperability with the stock `minisign` tool (0.11), in both directions (docs/protocol.md#signatures).
@Suite("minisign interoperability")
struct TrustMinisignInteropTests {
    let message = Array("{\"format\": 1, \"sequence\": 7, \"packages\": []}\n".utf8)

    @Test("stock minisign signatures verify", arguments: [MinisignSignature.Algorithm.prehashed, .legacy])
    func stockSignatureVerifies(algorithm: MinisignSignature.Algorithm) throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try TrustMinisignTool.generateKeyPair("stock", in: dir)
        try dir.write(message, to: "manifest.json")
        let comment = "timestamp:1700000000\tfile:manifest.json\tsequence:7"
        let legacyFlag = algorithm == .legacy ? ["-l"] : []
        try TrustMinisignTool.succeed(["-S"] + legacyFlag + ["-s", "stock.key", "-m", "manifest.json", "-t", comment], in: dir)

        let signature = try dir.read("manifest.json.minisig")
        #expect(try MinisignSignature(parsing: signature, source: "test").algorithm == algorithm)
        let key = try TrustedKey(contentsOfFile: dir.path("stock.pub"))
        let trusted = try SignatureVerifier.verify(message: message, signature: signature, keys: [key], source: "test")
        #expect(trusted == comment)
    }

    @Test("the algorithm bytes choose what was signed: a legacy signature relabelled as prehashed is refused")
    func relabelledLegacySignatureRefused() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try TrustMinisignTool.generateKeyPair("stock", in: dir)
        try dir.write(message, to: "manifest.json")
        try TrustMinisignTool.succeed(["-S", "-l", "-s", "stock.key", "-m", "manifest.json"], in: dir)
        var signature = try MinisignSignature(parsing: try dir.read("manifest.json.minisig"), source: "test")
        signature.algorithm = .prehashed
        let key = try TrustedKey(contentsOfFile: dir.path("stock.pub"))
        let reason = trustRefusalReason {
            _ = try SignatureVerifier.verify(
                message: message, signature: signature.fileContents, keys: [key], source: "test-source")
        }
        #expect(reason?.hasPrefix("wrong signature: the prehashed (ED) ed25519 signature") == true)
    }

    @Test("stock key files parse: public key, its base64 line, and the -W secret key")
    func stockKeysParse() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try TrustMinisignTool.generateKeyPair("stock", in: dir)
        let publicFile = String(decoding: try dir.read("stock.pub"), as: UTF8.self)
        let lines = publicFile.split(separator: "\n").map(String.init)
        let key = try TrustedKey(contentsOfFile: dir.path("stock.pub"))
        // minisign 0.11 (Debian 12) prints the key ID unpadded ("%" PRIX64), later releases pad it to 16
        // digits, as offlinepkg does: compare the number, not the text.
        let commentPrefix = "untrusted comment: minisign public key "
        #expect(lines[0].hasPrefix(commentPrefix))
        #expect(UInt64(lines[0].dropFirst(commentPrefix.count), radix: 16) == UInt64(key.keyID, radix: 16))
        #expect(key.keyID.count == 16)
        #expect(key.minisignPublicKey == lines[1])
        #expect(try TrustedKey(minisignPublicKey: lines[1]) == key)
        #expect(try TrustedKey(minisignPublicKey: publicFile) == key)

        let secret = try SigningKey(contentsOfFile: dir.path("stock.key"))
        #expect(secret.publicKey == key)
        #expect(secret.keyID == key.keyID)
    }

    @Test("signatures by offlinepkg pass stock minisign -V, prehashed required (-H)")
    func ourSignatureVerifiesWithStockMinisign() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        try key.write(prefix: dir.path("ours"))
        try dir.write(message, to: "manifest.json")
        let comment = "sequence:7\tfile:manifest.json"
        try dir.write(try key.sign(message, trustedComment: comment), to: "manifest.json.sig")

        let output = try TrustMinisignTool.succeed(
            ["-V", "-H", "-p", "ours.pub", "-m", "manifest.json", "-x", "manifest.json.sig"], in: dir)
        #expect(output.contains("Trusted comment: \(comment)"))
        // -P takes the base64 line alone.
        try TrustMinisignTool.succeed(
            ["-V", "-P", key.publicKey.minisignPublicKey, "-m", "manifest.json", "-x", "manifest.json.sig"], in: dir)

        // And minisign notices when the file changes, so the test above can fail.
        try dir.write(message + [0x20], to: "manifest.json")
        let tampered = try TrustMinisignTool.run(
            ["-V", "-p", "ours.pub", "-m", "manifest.json", "-x", "manifest.json.sig"], in: dir)
        #expect(tampered.status != 0)
    }

    @Test("stock minisign -S signs with a key offlinepkg wrote")
    func stockMinisignSignsWithOurKey() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        let key = SigningKey.generate()
        try key.write(prefix: dir.path("ours"))
        try dir.write(message, to: "manifest.json")
        // -p makes minisign check that the secret key matches our public key file before it writes.
        try TrustMinisignTool.succeed(
            ["-S", "-s", "ours.key", "-p", "ours.pub", "-m", "manifest.json", "-t", "made by stock"], in: dir)
        let trusted = try SignatureVerifier.verify(
            message: message, signature: try dir.read("manifest.json.minisig"), keys: [key.publicKey], source: "test")
        #expect(trusted == "made by stock")
        // minisign -R rebuilds the public key from our secret key file: the same key ID and key.
        try TrustMinisignTool.succeed(["-R", "-s", "ours.key", "-p", "rebuilt.pub"], in: dir)
        #expect(try TrustedKey(contentsOfFile: dir.path("rebuilt.pub")) == key.publicKey)
    }

    @Test("a stock -W secret key signs through offlinepkg, and stock minisign accepts the signature")
    func stockKeySignsThroughOfflinepkg() throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-trust")
        try TrustMinisignTool.generateKeyPair("stock", in: dir)
        let key = try SigningKey(contentsOfFile: dir.path("stock.key"))
        try dir.write(message, to: "manifest.json")
        try dir.write(try key.sign(message, trustedComment: "via offlinepkg"), to: "manifest.json.minisig")
        let output = try TrustMinisignTool.succeed(["-V", "-p", "stock.pub", "-m", "manifest.json"], in: dir)
        #expect(output.contains("Trusted comment: via offlinepkg"))
    }

    @Test("offlinepkg verifies its own signatures over any message size", arguments: [0, 1, 64, 200_000])
    func roundTrip(size: Int) throws {
        let key = SigningKey.generate()
        let message = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let signature = try key.sign(message, trustedComment: "size \(size)")
        let trusted = try SignatureVerifier.verify(message: message, signature: signature, keys: [key.publicKey], source: "test")
        #expect(trusted == "size \(size)")
    }

    @Test("the right key is found among several trusted ones")
    func severalTrustedKeys() throws {
        let keys = (0..<3).map { _ in SigningKey.generate() }
        let signature = try keys[1].sign(message, trustedComment: "second")
        let trusted = try SignatureVerifier.verify(
            message: message, signature: signature, keys: keys.map(\.publicKey), source: "test")
        #expect(trusted == "second")
    }
}
