/// Which keys of a role signed some bytes, from the signature files found for them
/// (docs/protocol.md#keys-documents: one stock minisign signature per file). A key counts once however many
/// files name it, so one key can never stand for a threshold of two.
package struct SignerTally: Sendable {
    /// The role's keys with a valid signature, in the role's order.
    package private(set) var valid: [TrustedKey] = []
    /// Key ids of the signatures that did not count: by a key the role does not list, or that did not
    /// verify; in the order found, each once.
    package private(set) var others: [String] = []

    /// Checks each of `signatures` (the bytes of `.minisig` files) over `message` against `keys`.
    package init(message: [UInt8], signatures: [[UInt8]], keys: [TrustedKey], source: String) {
        for file in signatures {
            guard let parsed = try? MinisignSignature(parsing: file, source: source) else { continue }
            let key = keys.first { candidate in
                candidate.keyIDBytes == parsed.keyIDBytes
                    && (try? SignatureVerifier.verify(message: message, signature: file, keys: [candidate], source: source))
                        != nil
            }
            if let key {
                // Distinct public keys, not key ids: an id is a label the signature does not cover.
                if !valid.contains(where: { $0.publicKeyBytes == key.publicKeyBytes }) { valid.append(key) }
            } else if !others.contains(parsed.keyID) {
                others.append(parsed.keyID)
            }
        }
        valid = keys.filter(valid.contains)
    }

    package func meets(_ threshold: Int) -> Bool { valid.count >= threshold }

    /// "needs 2 signatures of version 3's root keys (A, B, C); valid: A; missing 1 of: B, C", and the
    /// signatures that did not count, each with why when `removed` (key id → the version that removed
    /// it) knows the key: "not counted: D (removed in keys version 2: revoked)".
    package func shortfall(of role: KeysDocument.Role, named name: String, removed: [String: Int] = [:]) -> String {
        let needed = role.threshold == 1 ? "1 signature" : "\(role.threshold) signatures"
        let missing = role.keys.filter { !valid.contains($0) }.map(\.keyID)
        let short = role.threshold - valid.count
        var text = "needs \(needed) of \(name) (\(role.keyIDs.joined(separator: ", ")))"
        text += "; valid: " + (valid.isEmpty ? "none" : valid.map(\.keyID).joined(separator: ", "))
        if short > 0 && !missing.isEmpty {
            text += short == missing.count ? "; missing: " : "; missing \(short) of: "
            text += missing.joined(separator: ", ")
        }
        if !others.isEmpty {
            let described = others.map { id in removed[id].map { "\(id) (removed in keys version \($0): revoked)" } ?? id }
            text += "; not counted: \(described.joined(separator: ", "))"
        }
        return text
    }
}

/// The rule that chains keys documents (docs/protocol.md#keys-documents, TUF's root rotation): version N+1
/// is trusted when a threshold of version N's root keys and a threshold of its own root keys signed its
/// exact bytes. Expiry is not checked here: an expired version may still lead to a newer one, and only the
/// version a device ends at must be current.
package enum KeysChain {
    /// What is wrong with `next` following `trusted`, or nil when it may. `signatures` are the signature
    /// files found beside `next`; `removed` names keys earlier versions dropped, for the message.
    package static func problem(
        from trusted: KeysDocument, to next: KeysDocument, signatures: [[UInt8]], removed: [String: Int] = [:], source: String
    ) -> String? {
        guard next.version == trusted.version + 1 else {
            return "it says version \(next.version) where version \(trusted.version + 1) must follow version \(trusted.version)"
        }
        let previous = SignerTally(message: next.bytes, signatures: signatures, keys: trusted.root.keys, source: source)
        guard previous.meets(trusted.root.threshold) else {
            return "version \(next.version) breaks the chain: it "
                + previous.shortfall(of: trusted.root, named: "version \(trusted.version)'s root keys", removed: removed)
        }
        let own = SignerTally(message: next.bytes, signatures: signatures, keys: next.root.keys, source: source)
        guard own.meets(next.root.threshold) else {
            return "version \(next.version) breaks the chain: it "
                + own.shortfall(of: next.root, named: "its own root keys", removed: removed)
        }
        return nil
    }

    /// The root keys whose signature files a reader looks for beside version `next`: the trusted
    /// version's first, then the new ones, each id once.
    package static func signingCandidates(from trusted: KeysDocument, to next: KeysDocument) -> [TrustedKey] {
        var keys = trusted.root.keys
        for key in next.root.keys where !keys.contains(where: { $0.keyIDBytes == key.keyIDBytes }) { keys.append(key) }
        return keys
    }
}
