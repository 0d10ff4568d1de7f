// Fuzz target for the minisign parsers in Sources/OfflinePkg/Trust (see FuzzMain.swift).
//
// Besides "never crash", it checks properties that hold for any input:
// - base64 is canonical: whatever decodes re-encodes to the same text;
// - a signature file that parses re-serializes to one that parses to the same value;
// - nothing verifies against a key that signed nothing.

// The public half of a fixed seed (the publisher's `SigningKey` is not part of the OfflinePkg module).
private let fuzzKey = TrustedKey(
    keyIDBytes: [1, 2, 3, 4, 5, 6, 7, 8], publicKeyBytes: Ed25519.publicKey(seed: [UInt8](repeating: 7, count: 32)))
private let fuzzMessage = Array("{\"format\": 1, \"sequence\": 1, \"packages\": []}".utf8)

func fuzzSignature(_ bytes: [UInt8]) {
    if let decoded = Base64.decode(bytes) {
        precondition(Base64.encode(decoded) == bytes, "base64 accepted a non-canonical encoding")
    }

    if let signature = try? MinisignSignature(parsing: bytes, source: "fuzz") {
        let reparsed = try? MinisignSignature(parsing: signature.fileContents, source: "fuzz")
        precondition(reparsed == signature, "a parsed signature does not survive re-serialization")
    }

    let trusted = try? SignatureVerifier.verify(message: fuzzMessage, signature: bytes, keys: [fuzzKey], source: "fuzz")
    precondition(trusted == nil, "a signature nobody made verified")

    _ = try? TrustedKey(minisignPublicKey: String(decoding: bytes, as: UTF8.self))
}
