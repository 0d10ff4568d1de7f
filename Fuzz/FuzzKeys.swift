import Foundation

// Fuzz target for keys documents (docs/protocol.md#keys-documents): any input either parses into a document
// that keeps the format's invariants, or is refused with an OfflinePkgError — never a crash. And nothing
// counts as a signature of it but a signature: the input read as a signature file signs nothing for its
// keys.
func fuzzKeys(_ bytes: [UInt8]) {
    guard let document = try? KeysDocument(bytes: bytes, source: "fuzz") else { return }
    precondition(document.version >= 1, "accepted a version below 1")
    precondition(document.bytes == bytes, "kept other bytes than it read")
    for role in [document.root, document.manifest] {
        precondition(!role.keys.isEmpty && role.keys.count <= KeysDocument.maximumKeysPerRole, "bad key count")
        precondition((1...role.keys.count).contains(role.threshold), "threshold out of range")
        precondition(Set(role.keys.map(\.keyID)).count == role.keys.count, "two keys under one id")
        precondition(
            role.keys.allSatisfy { (try? TrustedKey(minisignPublicKey: $0.minisignPublicKey)) == $0 }, "key does not round-trip")
    }
    let tally = SignerTally(
        message: bytes, signatures: [bytes], keys: document.root.keys + document.manifest.keys, source: "fuzz")
    precondition(tally.valid.isEmpty, "a document signed itself")
}
