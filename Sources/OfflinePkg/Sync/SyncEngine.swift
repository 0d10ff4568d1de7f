import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// One sync, as named stages, each a method that returns what the next one needs:
///
///     lock → begin → check and accept (CheckedManifest, AcceptedRelease) → plan (PlannedRelease)
///       → install (InstalledPackages) → switch (SwitchedSet) → clean up → report
///
/// Every stage before the switch leaves the active set untouched; the switch is one atomic rename.
/// The root's state is saved where a stage commits, once each: the accepted manifest and the plan
/// before anything is downloaded (rollback protection), or the unchanged check; the finished evaluation
/// after the switch. A failure is recorded by the `Updater` that ran the engine (`CacheRoot.recordFailure`).
///
/// A dry run (`dryRun()`) runs the same stages up to the plan with none of their commits, and then
/// says what the install stage would fetch.
package struct SyncEngine: Sendable {
    package var layout: CacheLayout
    package var manifestURL: URL
    package var options: Updater.Options
    /// The clock and the network of this sync.
    package var world: World
    /// Told what this sync accepted and planned, for its install report; nil for a dry run.
    package var attempt: SyncAttempt?
    /// The world's transport, its transfers sharing connections for this sync (`CurlSession`).
    let transport: any Transport
    /// How the origins of file-level updates take ranges, read from the root once per sync.
    let origins: OriginRanges
    /// The manifest's first answer in this sync, which the early requests wait on.
    let manifestAnswer = ManifestAnswer()

    /// The manifest URL as the root keeps and reports it: without userinfo (docs/protocol.md#neighbours-on-the-device).
    var source: String { Userinfo.removed(from: manifestURL) }

    package init(layout: CacheLayout, manifestURL: URL, options: Updater.Options, world: World) {
        self.layout = layout
        self.manifestURL = manifestURL
        self.options = options
        self.world = world
        transport = (world.transport as? CurlTransport)?.sharingConnections() ?? world.transport
        origins = OriginRanges(layout: layout, clock: world.clock)
    }

    /// The unpack limits of this sync.
    var limits: UnpackLimits { options.unpackLimits }
    func now() -> Date { world.clock.now() }

    package func run() async throws -> SyncReport {
        // Lock: the root's folders are made here, once per sync, then the one-sync-at-a-time lock.
        try layout.prepare()
        let (events, root) = (options.events, layout.root)
        let lock = try await RootLock.acquire(layout: layout, wait: options.waitForLock) { events?(.waitingForLock(root: root)) }
        defer { withExtendedLifetime(lock) {} }
        // A new locked operation: held content is hashed again before it is reused.
        ContentLedger.of(layout).lockTaken()
        let start = try begin()
        if let skipped = skipIfCheckedRecently(start) { return skipped }
        let early = startEarlyRequests(start)
        defer { early.cancel() }
        let accepted = try await accept(start)
        if accepted.unchanged { return try finishUnchanged(accepted) }
        let planned = try plan(accepted)
        let installed = try await install(planned.plan.toInstall, current: planned.current, early: early)
        let switched = try switchSet(planned, installed)
        cleanUp()
        return report(switched, planned, installed)
    }

    /// `sync --dry-run` (man/offlinepkg.1): the stages of `run()` up to the plan — the manifest fetched and
    /// verified, gating applied — with none of their commits: no lock, no state, no stored manifest, no
    /// device ID, no download; then how the install stage would bring each package (`preview`). Not
    /// skipped by `--min-interval`, and a manifest evaluated before is planned all the same.
    package func dryRun() async throws -> SyncPlan {
        let start = try begin(dryRun: true)
        let accepted = try await accept(start, dryRun: true)
        let planned = try plan(accepted, dryRun: true)
        return await preview(planned)
    }

    func planner(deviceID: String, state: SyncState) -> ReleasePlanner {
        ReleasePlanner(
            layout: layout, shellVersion: options.shellVersion.flatMap(ShellVersion.init), deviceID: deviceID,
            reverted: state.reverted ?? [:], rolledBack: state.rolledBack ?? [:])
    }

    /// Events for what the plan holds back and for each release it will install.
    func announce(_ plan: ReleasePlan, manifest: Manifest, current: ActiveSet) {
        for held in plan.heldBack {
            options.events?(.heldBack(packageID: held.id, version: held.version, reason: held.reason))
        }
        for package in plan.packages where current.package(package.id)?.version != package.version {
            options.events?(
                .releaseAvailable(
                    packageID: package.id, version: package.version, notes: package.notes, mandatory: package.mandatory ?? false))
        }
    }

    /// The manifest as the check stage brought it (or the stored copy, after a 304), with its signature.
    /// Its sha256 is computed here, once per fetch.
    struct CheckedManifest {
        var response: ManifestFetcher.Response
        let bytes: [UInt8]
        let sha256: String
        var signature: [UInt8]?
        var signatureFromNetwork: Bool
        var requests: Int
        /// Under a keys document: the signature files of its manifest keys (kept by the root after a
        /// 304, or fetched), and whether they came from the network this time.
        var signatures: [[UInt8]] = []
        var signaturesFromNetwork = false
        /// The key ids whose signatures were accepted.
        var signers: [String] = []

        init(
            response: ManifestFetcher.Response, bytes: [UInt8], signature: [UInt8]?, signatureFromNetwork: Bool, requests: Int
        ) {
            self.response = response
            self.bytes = bytes
            sha256 = SHA256.hash(bytes).hex
            self.signature = signature
            self.signatureFromNetwork = signatureFromNetwork
            self.requests = requests
        }
    }

    /// Check, then accept, under what the sync trusts (`resolveTrust`). A manifest refused as a rollback, a
    /// fresh one whose signature does not verify, or one whose keys versions do not, may be a CDN edge
    /// that holds an old copy of a file: everything is fetched once more with `Cache-Control: no-cache`
    /// before the refusal stands (docs/protocol.md#checking-the-manifest). A newer keys version verified on the way is written to the
    /// root when `commit` (not for `--dry-run`), and is in `state` either way.
    func checkAndAccept(state: inout SyncState, sameSource: Bool, commit: Bool) async throws -> (
        CheckedManifest, Manifest, SyncTrust
    ) {
        var trust = try resolveTrust(state)
        var checked = try await check(conditionally: sameSource ? state : nil, uncached: false, trust: trust, commit: commit)
        do {
            let manifest = try await accept(&checked, state: &state, trust: &trust, uncached: false, commit: commit)
            return (checked, manifest, trust)
        } catch let error as OfflinePkgError {
            switch error {
            case .manifestRollback, .keysRefused: break
            case .signatureRefused where !checked.response.isNotModified: break
            default: throw error
            }
            options.events?(.retryingUncached(reason: "\(error)"))
            var again = try await check(conditionally: nil, uncached: true, trust: trust, commit: commit)
            again.requests += checked.requests
            let manifest = try await accept(&again, state: &state, trust: &trust, uncached: true, commit: commit)
            return (again, manifest, trust)
        }
    }

    /// The check stage: the manifest (conditionally, with the validators of `stored`, if any) and, under
    /// fixed keys, its signature. A 304 brings back the stored copy and the signatures kept with it.
    /// Each answer's head tells `manifestAnswer` (the early requests wait on it) and, unless a dry run,
    /// the origins record its protocol.
    private func check(conditionally stored: SyncState?, uncached: Bool, trust: SyncTrust, commit: Bool) async throws
        -> CheckedManifest
    {
        let fetcher = manifestFetcher()
        options.events?(.checking(manifestURL: source))
        let (origins, answer, manifestURL) = (self.origins, manifestAnswer, self.manifestURL)
        let response = try await fetcher.fetchManifest(
            manifestURL, etag: stored?.etag, lastModified: stored?.lastModified, uncached: uncached
        ) { head in
            answer.answered(head.status)
            if commit { origins.remember(http: head.httpVersion, for: manifestURL, server: head.headers["server"]) }
        }
        var requests = 1
        let bytes: [UInt8]
        var signature: [UInt8]?
        var kept = [[UInt8]]()
        switch response {
        case .notModified:
            options.events?(.manifestUnchanged)
            bytes = try FileSystem.read(layout.storedManifest, limit: Manifest.maximumSize)
            // Keys configured after the stored manifest was taken unsigned: its signature is fetched.
            signature = try? FileSystem.read(layout.storedSignature, limit: 64 << 10)
            kept = Self.storedSignatures(layout)
        case .fetched(let fetched, _, _):
            bytes = fetched
        }
        var fromNetwork = false
        guard case .keys(let keys) = trust.anchor else {
            var checked = CheckedManifest(
                response: response, bytes: bytes, signature: signature, signatureFromNetwork: false, requests: requests)
            checked.signatures = kept
            return checked
        }
        if signature == nil {
            signature = try await fetcher.fetchSignature(manifestURL, uncached: uncached)
            fromNetwork = true
            requests += 1
        }
        var checked = CheckedManifest(
            response: response, bytes: bytes, signature: signature, signatureFromNetwork: fromNetwork, requests: requests)
        if fromNetwork && !verifies(bytes, signature, keys) {
            // An edge that cached `.minisig` at another time than the manifest: the copy named after the
            // manifest's own hash cannot be out of step with it. A manifest signed by several keys has
            // one such file per key, the trusted one among them.
            var candidates = [ManifestFetcher.immutableSignatureURL(of: manifestURL, manifestSHA256: checked.sha256)]
            candidates += keys.map {
                ManifestFetcher.keySignatureURL(of: manifestURL, manifestSHA256: checked.sha256, keyID: $0.keyID)
            }
            for url in candidates {
                checked.requests += 1
                if let file = try? await fetcher.fetchSignature(at: url), verifies(bytes, file, keys) {
                    checked.signature = file
                    break
                }
            }
        }
        return checked
    }

    private func verifies(_ bytes: [UInt8], _ signature: [UInt8]?, _ keys: [TrustedKey]) -> Bool {
        guard let signature else { return false }
        return
            (try? SignatureVerifier.verify(message: bytes, signature: signature, keys: keys, source: source))
            != nil
    }

    /// The threshold signatures the root kept with its stored manifest.
    static func storedSignatures(_ layout: CacheLayout) -> [[UInt8]] {
        guard let bytes = try? FileSystem.read(layout.storedSignatures, limit: 1 << 20),
            let texts = try? JSONDecoder().decode([String].self, from: Data(bytes))
        else { return [] }
        return texts.compactMap { Base64.decode(Array($0.utf8)) }
    }

    /// What the stored manifest was judged with: a change of any of them re-evaluates it after a 304.
    func evaluationInputs(_ trust: SyncTrust) -> String {
        let keys: String
        switch trust.anchor {
        case .keys(let trusted): keys = trusted.map(\.keyID).sorted().joined(separator: ",")
        case .document(let document): keys = "v\(document.version)-\(document.sha256.prefix(16))"
        case nil: keys = ""
        }
        return "shell=\(options.shellVersion ?? "*");keys=\(keys);limits=\(limits.maxEntries)/\(limits.maxBytes)"
    }

    /// The accept stage: the signature (fixed keys) or the keys versions and a threshold of signatures (a
    /// keys document), then the manifest's own rules, freeze and rollback protection. The rollback
    /// baseline holds only under the manifest keys it was accepted under (fast-forward recovery,
    /// docs/protocol.md#keys-documents); when they changed, `state` notes the reset.
    private func accept(
        _ checked: inout CheckedManifest, state: inout SyncState, trust: inout SyncTrust, uncached: Bool, commit: Bool
    ) async throws -> Manifest {
        let bytes = checked.bytes
        let manifest: Manifest
        switch trust.anchor {
        case nil:
            manifest = try Manifest(parsing: bytes, source: source)
        case .keys(let keys):
            guard let signature = checked.signature else {
                let reason =
                    trust.remembered
                    ? "no signature at \(source).minisig, and this root trusts \(trust.anchor!.summary) for it\(rememberedNote(trust))"
                    : "no signature at \(source).minisig, and trusted keys are configured"
                throw OfflinePkgError.signatureRefused(source: source, reason: reason)
            }
            _ = try SignatureVerifier.verify(message: bytes, signature: signature, keys: keys, source: source)
            checked.signers = [try MinisignSignature(parsing: signature, source: source).keyID]
            manifest = try Manifest(parsing: bytes, source: source)
        case .document:
            // Parsed before its signatures are checked: the manifest names the keys version they are
            // checked under. The reader is the strict one either way (and fuzzed).
            manifest = try Manifest(parsing: bytes, source: source)
            try await followNamedKeys(
                manifest, trust: &trust, state: &state, requests: &checked.requests, uncached: uncached, commit: commit)
            guard case .document(let document) = trust.anchor else { preconditionFailure("a keys document stays one") }
            if document.hasExpired(at: now()) {
                throw OfflinePkgError.keysRefused(
                    source: ManifestFetcher.keysDocumentURL(of: manifestURL, version: document.version).absoluteString,
                    reason:
                        "keys version \(document.version), the newest this root trusts for \(source), expired at \(RFC3339.format(document.expires!)) (freeze protection); the publisher must renew it (`offlinepkg keys rotate`) and publish a manifest that names the new version"
                )
            }
            try await verifyThreshold(&checked, document: document, trust: trust, uncached: uncached)
        }
        if let expires = manifest.expires, expires <= now() {
            throw OfflinePkgError.manifestExpired(source: source, expires: RFC3339.format(expires))
        }
        // Per manifest URL: another URL is another channel, with a history of its own.
        if let accepted = state.accepted(from: source) {
            if let signedUnder = accepted.manifestKeys, case .document(let document) = trust.anchor,
                signedUnder != document.manifest.fingerprint
            {
                // Accepted under other manifest keys: the sequence may be a leaked key's 2^63-1. Fixed keys
                // (`--trust-key`) do not rotate, and keep their baseline whatever keys are given.
                state.resetBaseline(for: source, keysVersion: document.version, at: now())
            } else {
                if manifest.sequence < accepted.sequence {
                    throw OfflinePkgError.manifestRollback(
                        source: source, reason: "sequence \(manifest.sequence) is lower than the accepted \(accepted.sequence)")
                }
                if manifest.sequence == accepted.sequence, let digest = accepted.sha256, digest != checked.sha256 {
                    throw OfflinePkgError.manifestRollback(
                        source: source, reason: "sequence \(accepted.sequence) was accepted before with other content")
                }
            }
        }
        return manifest
    }

    func emptyReport(_ outcome: SyncReport.Outcome, _ set: ActiveSet, requests: Int = 0) -> SyncReport {
        SyncReport(
            outcome: outcome, generation: set.generation, sequence: set.sequence, changes: [], heldBack: [], bytesFetched: 0,
            requests: requests)
    }

    /// What a switch from `old` to `new` changes, package by package: how each new tree arrives
    /// (`routes`, else `.cache`: on disk already) and what it costs on the network (`bytes`). The one
    /// list a sync reports and keeps for `status`, and a dry run shows.
    static func changes(
        from old: ActiveSet, to new: ActiveSet, routes: [String: InstallRoute], bytes: [String: Int64]
    ) -> [PackageChange] {
        var changes = [PackageChange]()
        for package in new.packages {
            let before = old.package(package.id)
            if before?.version != package.version || before?.tree != package.tree {
                changes.append(
                    .init(
                        id: package.id, from: before?.version, to: package.version, via: routes[package.id] ?? .cache,
                        notes: package.notes, mandatory: package.mandatory, bytes: bytes[package.id] ?? 0))
            }
        }
        for package in old.packages where new.package(package.id) == nil {
            changes.append(.init(id: package.id, from: package.version, to: nil, via: nil))
        }
        return changes
    }
}

extension ManifestFetcher.Response {
    var isNotModified: Bool {
        if case .notModified = self { return true }
        return false
    }
}
