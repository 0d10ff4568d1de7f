import FoundationEssentials

/// What a root trusts for one manifest URL, kept in `state.json` beside the rollback baseline so that one
/// atomic write changes both (docs/protocol.md#keys-documents): a `kill -9` while keys are updated leaves
/// the old trust with its baseline, or the new trust with the baseline it implies, never one without the
/// other.
package struct StoredTrust: Codable, Sendable, Equatable {
    /// The keys document trusted now, its exact bytes in base64, when the root follows a publisher's keys.
    package var document: String?
    /// The fixed keys trusted (their base64 lines), when the root was given `--trust-key`.
    package var keys: [String]?
    /// Keys that a keys version dropped, by id: the version that dropped them (revocation is removal),
    /// so that a refusal can say which key was removed and when.
    package var removed: [String: Int]?
    /// When this root first trusted the anchor, or last moved it forward.
    package var since: Date
    /// The last rollback baseline a change of the manifest keys reset (fast-forward recovery).
    package var baselineReset: BaselineReset?

    package init(anchor: TrustAnchor, since: Date) {
        self.since = since
        switch anchor {
        case .keys(let keys): self.keys = keys.map(\.minisignPublicKey)
        case .document(let document): self.document = String(decoding: Base64.encode(document.bytes), as: UTF8.self)
        }
    }

    /// The anchor, read back; `source` names the state file in an error.
    package func anchor(source: String) throws -> TrustAnchor {
        if let document {
            guard let bytes = Base64.decode(Array(document.utf8)) else {
                throw OfflinePkgError.corruptState(path: source, reason: "the trusted keys document is not base64")
            }
            do {
                return .document(try KeysDocument(bytes: bytes, source: source))
            } catch {
                throw OfflinePkgError.corruptState(path: source, reason: "the trusted keys document does not parse: \(error)")
            }
        }
        do {
            let keys = try (keys ?? []).map { try TrustedKey(minisignPublicKey: $0) }
            guard !keys.isEmpty else { throw OfflinePkgError.invalidArgument("no key") }
            return .keys(keys)
        } catch {
            throw OfflinePkgError.corruptState(path: source, reason: "the trusted keys do not parse: \(error)")
        }
    }
}

/// A rollback baseline dropped because the manifest keys changed (fast-forward recovery,
/// docs/protocol.md#keys-documents).
package struct BaselineReset: Codable, Sendable, Equatable {
    /// The keys version whose manifest keys differ from those the baseline was accepted under.
    package var keysVersion: Int?
    /// The sequence that was the baseline.
    package var sequence: Int
    package var time: Date
}

/// A keys document a sync verified past what the root trusted: the chain walked (or a newer document
/// the shell ships), the keys it dropped, and whether the manifest keys changed on the way.
package struct TrustAdvance: Sendable {
    package var document: KeysDocument
    package var removed: [String: Int]
    /// The manifest keys or their threshold changed at some version on the way: the rollback baseline
    /// no longer holds.
    package var resetsBaseline: Bool
    /// The version the chain was followed from; nil when the shell shipped a newer document than the
    /// root held, and no version was fetched.
    package var walkedFrom: Int? = nil
}

extension SyncState {
    /// What the root trusts for `url`, if anything; `source` names the state in an error.
    package func trustedAnchor(for url: String, source: String) throws -> TrustAnchor? {
        try trust?[url]?.anchor(source: source)
    }

    /// Remembers `anchor` for `url` once a manifest signed under it was accepted: a later sync of the
    /// URL given no keys uses it (docs/protocol.md#keys-documents).
    package mutating func remember(_ anchor: TrustAnchor, for url: String, at time: Date) {
        let kept = trust?[url]
        if let kept, (try? kept.anchor(source: "")) == anchor { return }
        var record = StoredTrust(anchor: anchor, since: time)
        record.removed = kept?.removed
        record.baselineReset = kept?.baselineReset
        trust = (trust ?? [:]).merging([url: record]) { $1 }
    }

    /// Moves the trust of `url` to a verified newer keys document, resetting the rollback baseline when
    /// the manifest keys changed on the way: the sequence a leaked key signed stops locking the device
    /// out, while a manifest under an older keys version is still refused (the version only grows).
    package mutating func advanceTrust(_ advance: TrustAdvance, for url: String, at time: Date) {
        var record = StoredTrust(anchor: .document(advance.document), since: time)
        record.removed = advance.removed.isEmpty ? nil : advance.removed
        record.baselineReset = trust?[url]?.baselineReset
        trust = (trust ?? [:]).merging([url: record]) { $1 }
        if advance.resetsBaseline { resetBaseline(for: url, keysVersion: advance.document.version, at: time) }
    }

    /// Drops the rollback baseline of `url`, noting what it was.
    package mutating func resetBaseline(for url: String, keysVersion: Int?, at time: Date) {
        guard let record = accepted(from: url) else { return }
        trust?[url]?.baselineReset = BaselineReset(keysVersion: keysVersion, sequence: record.sequence, time: time)
        channels?[url] = nil
        if manifestURL == url {
            acceptedSequence = nil
            acceptedManifestSHA256 = nil
        }
    }

    /// Forgets what the root trusts for `url`, or for every URL when nil; returns the URLs forgotten.
    /// The rollback baselines stay: they do not depend on signatures.
    package mutating func forgetTrust(for url: String?) -> [String] {
        guard let trust else { return [] }
        let forgotten = url.map { trust[$0] == nil ? [] : [$0] } ?? trust.keys.sorted()
        for name in forgotten { self.trust?[name] = nil }
        if self.trust?.isEmpty == true { self.trust = nil }
        return forgotten
    }
}
