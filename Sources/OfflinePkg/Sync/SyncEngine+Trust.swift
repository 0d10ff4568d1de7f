import FoundationEssentials

/// The trust one sync runs under for its manifest URL (docs/protocol.md#keys-documents), and what it
/// verified on the way.
struct SyncTrust: Sendable {
    /// Nil: nothing is trusted, the manifest is taken unsigned (its archives are still checked).
    var anchor: TrustAnchor?
    /// Keys that keys versions dropped, by id: the version that dropped them.
    var removed: [String: Int] = [:]
    /// The anchor is the root's memory of an earlier signed sync: the caller gave no keys.
    var remembered = false
    /// Since when the root trusts it, when remembered.
    var since: Date?
    /// A newer keys document verified (or shipped) but not yet in the root's state.
    var pending: TrustAdvance?
}

extension SyncEngine {
    /// Keys versions one sync follows at most: each costs a few requests, and a chain this long between
    /// two syncs is not a publisher's.
    static let maximumKeysSteps = 256

    /// What this sync trusts: the caller's keys or keys document, else what the root remembers for the URL.
    /// A shipped keys document older than the one the root verified since is not used: the root never goes
    /// back (docs/protocol.md#keys-documents); a newer one moves the root forward, as a walk of the chain
    /// would.
    func resolveTrust(_ state: SyncState) throws -> SyncTrust {
        let url = source
        let record = state.trust?[url]
        let stored = try state.trustedAnchor(for: url, source: layout.state)
        var trust = SyncTrust(removed: record?.removed ?? [:])
        if let shipped = options.trustRoot {
            guard options.trustedKeys.isEmpty else {
                throw OfflinePkgError.invalidArgument(
                    "trusted keys and a trust root are two ways to trust a manifest URL: give one (a keys document rotates, fixed keys do not)"
                )
            }
            trust.anchor = .document(shipped)
            guard case .document(let held) = stored else { return trust }
            if held.version > shipped.version {
                trust.anchor = .document(held)
            } else if held.version == shipped.version {
                guard held.bytes == shipped.bytes else {
                    throw OfflinePkgError.keysRefused(
                        source: url,
                        reason:
                            "this root trusts keys version \(held.version) for it (sha256 \(held.sha256.prefix(16))…), and the trust root given is a version \(shipped.version) with other content (sha256 \(shipped.sha256.prefix(16))…); keys documents never change once published. If the publisher started a new chain, forget the old one with `offlinepkg trust --reset \(url)`"
                    )
                }
            } else {
                var removed = trust.removed
                for key in shipped.keysRemoved(since: held) { removed[key.keyID] = shipped.version }
                trust.removed = removed
                trust.pending = TrustAdvance(
                    document: shipped, removed: removed, resetsBaseline: shipped.manifest.fingerprint != held.manifest.fingerprint
                )
            }
            return trust
        }
        if !options.trustedKeys.isEmpty {
            trust.anchor = .keys(options.trustedKeys)
            return trust
        }
        trust.anchor = stored
        trust.remembered = stored != nil
        trust.since = record?.since
        return trust
    }

    /// The manifest's keys version against what the root trusts: refused when older (the version only
    /// grows), followed version by version when newer. What the walk verified is written to the root
    /// (`commit`) even when a later version or the manifest is refused: it is trusted now.
    func followNamedKeys(
        _ manifest: Manifest, trust: inout SyncTrust, state: inout SyncState, requests: inout Int, uncached: Bool,
        commit: Bool
    ) async throws {
        guard case .document(let trusted) = trust.anchor else { return }
        guard let named = manifest.keysVersion else {
            throw OfflinePkgError.signatureRefused(
                source: source,
                reason:
                    "the manifest names no keys version (\"keys\"), and this root trusts keys version \(trusted.version) for it\(rememberedNote(trust)); publish with `offlinepkg publish --sign-key` into a repository with keys documents"
            )
        }
        guard named >= trusted.version else {
            throw OfflinePkgError.keysRefused(
                source: source,
                reason:
                    "keys rollback: the manifest names keys version \(named), below version \(trusted.version) that this root trusts for it; keys versions only grow (a stale copy of the manifest, or one signed before a rotation)"
            )
        }
        do {
            if named > trusted.version {
                try await walk(from: trusted, to: named, trust: &trust, requests: &requests, uncached: uncached)
            }
        } catch {
            try commitPendingTrust(&trust, state: &state, commit: commit)
            throw error
        }
        try commitPendingTrust(&trust, state: &state, commit: commit)
    }

    /// Reads keys versions `trusted.version + 1` to `target` in order, none skipped, each verified against
    /// the one before it (`KeysChain`). Intermediate versions may have expired; the caller checks the last.
    private func walk(from trusted: KeysDocument, to target: Int, trust: inout SyncTrust, requests: inout Int, uncached: Bool)
        async throws
    {
        guard target - trusted.version <= Self.maximumKeysSteps else {
            throw OfflinePkgError.keysRefused(
                source: source,
                reason:
                    "the manifest names keys version \(target), \(target - trusted.version) versions past version \(trusted.version) that this root trusts; at most \(Self.maximumKeysSteps) are followed in one sync"
            )
        }
        let fetcher = manifestFetcher()
        var current = trusted
        var resets = trust.pending?.resetsBaseline ?? false
        for version in (trusted.version + 1)...target {
            let url = ManifestFetcher.keysDocumentURL(of: manifestURL, version: version)
            let name = url.absoluteString
            requests += 1
            guard let bytes = try await fetcher.fetchSmallFile(at: url, what: "keys document", uncached: uncached) else {
                throw OfflinePkgError.keysRefused(
                    source: name,
                    reason:
                        "not found: the manifest names keys version \(target), and every version from \(trusted.version + 1) to it is read in order, none skipped; this root keeps trusting keys version \(current.version). The publisher must upload keys/ with the manifest"
                )
            }
            let next = try KeysDocument(bytes: bytes, source: name)
            guard next.version == version else {
                throw OfflinePkgError.keysRefused(
                    source: name,
                    reason: "it says version \(next.version); this root keeps trusting keys version \(current.version)")
            }
            var signatures = [[UInt8]]()
            for key in KeysChain.signingCandidates(from: current, to: next) {
                requests += 1
                let signatureURL = ManifestFetcher.keysSignatureURL(of: manifestURL, version: version, keyID: key.keyID)
                if let file = try await fetcher.fetchSmallFile(at: signatureURL, what: "signature", uncached: uncached) {
                    signatures.append(file)
                }
                if KeysChain.problem(from: current, to: next, signatures: signatures, source: name) == nil { break }
            }
            if let problem = KeysChain.problem(
                from: current, to: next, signatures: signatures, removed: trust.removed, source: name)
            {
                throw OfflinePkgError.keysRefused(
                    source: name,
                    reason:
                        "\(problem); this root keeps trusting keys version \(current.version). The publisher must sign it with `offlinepkg keys rotate --sign-key`, one key for each missing signature"
                )
            }
            for key in next.keysRemoved(since: current) { trust.removed[key.keyID] = version }
            if next.manifest.fingerprint != current.manifest.fingerprint { resets = true }
            current = next
            trust.anchor = .document(next)
            trust.pending = TrustAdvance(
                document: next, removed: trust.removed, resetsBaseline: resets, walkedFrom: trusted.version)
        }
    }

    /// Puts a verified newer keys version into `state` and, when `commit`, into the root's state file:
    /// the trust and the rollback baseline it implies in one atomic write.
    private func commitPendingTrust(_ trust: inout SyncTrust, state: inout SyncState, commit: Bool) throws {
        guard let advance = trust.pending else { return }
        let url = source
        let previous = (try? state.trustedAnchor(for: url, source: layout.state)) ?? nil
        state.advanceTrust(advance, for: url, at: now())
        trust.pending = nil
        guard commit else { return }
        FailPoint.keysVerified.hit()
        var stored = try SyncState.load(layout)
        stored.advanceTrust(advance, for: url, at: now())
        try stored.save(layout)
        FailPoint.keysSaved.hit()
        let since = advance.walkedFrom ?? previous?.keysVersion ?? 0
        let removed = advance.removed.filter { $0.value > since }.keys.sorted()
        options.events?(.keysUpdated(from: advance.walkedFrom, to: advance.document.version, removed: removed))
    }

    /// A threshold of the keys document's manifest keys must have signed the manifest: the signatures
    /// the root kept (after a 304), then `signatures/<sha256>.<KEYID>.minisig` for each key still missing,
    /// in the document's order until the threshold is met, then the stock `.minisig` beside the manifest.
    func verifyThreshold(_ checked: inout CheckedManifest, document: KeysDocument, trust: SyncTrust, uncached: Bool)
        async throws
    {
        let role = document.manifest
        var files = checked.signatures
        var tally = SignerTally(message: checked.bytes, signatures: files, keys: role.keys, source: source)
        if !tally.meets(role.threshold) {
            let fetcher = manifestFetcher()
            for key in role.keys where !tally.valid.contains(key) {
                checked.requests += 1
                let url = ManifestFetcher.keySignatureURL(of: manifestURL, manifestSHA256: checked.sha256, keyID: key.keyID)
                if let file = try await fetcher.fetchSmallFile(at: url, what: "signature", uncached: uncached) {
                    files.append(file)
                }
                tally = SignerTally(message: checked.bytes, signatures: files, keys: role.keys, source: source)
                if tally.meets(role.threshold) { break }
            }
            if !tally.meets(role.threshold) {
                checked.requests += 1
                if let file = try await fetcher.fetchSignature(manifestURL, uncached: uncached) {
                    files.append(file)
                    tally = SignerTally(message: checked.bytes, signatures: files, keys: role.keys, source: source)
                }
            }
            checked.signatures = files
            checked.signaturesFromNetwork = true
        }
        guard tally.meets(role.threshold) else {
            throw OfflinePkgError.signatureRefused(
                source: source,
                reason:
                    "keys version \(document.version) "
                    + tally.shortfall(of: role, named: "its manifest keys", removed: trust.removed)
                    + " (looked for signatures/\(checked.sha256).<KEYID>.minisig and the .minisig beside the manifest); only a manifest published with --sign-key for \(role.threshold) of those keys is accepted"
            )
        }
        checked.signers = tally.valid.map(\.keyID)
    }

    /// For a message: where the trust of a sync given no keys came from, and how to drop it.
    func rememberedNote(_ trust: SyncTrust) -> String {
        guard trust.remembered else { return "" }
        let since = trust.since.map { " since \(RFC3339.format($0))" } ?? ""
        return
            " (remembered\(since): this root accepted signed manifests from this URL, and a sync given no keys uses what it trusts; `offlinepkg trust --reset \(source)` forgets it)"
    }

    /// The fetcher of the manifest, its signatures and keys documents.
    func manifestFetcher() -> ManifestFetcher {
        ManifestFetcher(
            transport: transport, retry: options.retry, limits: options.retrievalLimits, deadline: options.manifestDeadline,
            caBundle: options.caBundle)
    }
}
