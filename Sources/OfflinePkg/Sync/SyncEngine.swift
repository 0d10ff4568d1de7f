import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One sync, as named stages: lock → check → accept → plan → fetch and install → switch → clean up.
/// Every stage before the switch leaves the active set untouched; the switch is one atomic rename.
package struct SyncEngine: Sendable {
    package var layout: CacheLayout
    package var manifestURL: URL
    package var options: Updater.Options
    package var limits: UnpackLimits
    package var transport: any Transport
    package var now: @Sendable () -> Date = { Date() }

    package func run() async throws -> SyncReport {
        try layout.prepare()
        let lock = try await RootLock.acquire(layout: layout, wait: options.waitForLock)
        defer { withExtendedLifetime(lock) {} }
        do {
            return try await runLocked()
        } catch {
            // Monitoring sees failures too (SPEC §12): noted under the lock, and nothing but the
            // monitoring fields changes. An interrupted sync is noted by its caller, who knows the signal.
            if !Task.isCancelled {
                let status = (error as? OfflinePkgError)?.category.exitStatus ?? OfflinePkgError.Category.failure.exitStatus
                if var state = try? StoreState.load(layout) {
                    state.note(SyncFailure(time: now(), exitStatus: status, message: "\(error)"))
                    try? state.save(layout)
                }
            }
            throw error
        }
    }

    private func runLocked() async throws -> SyncReport {
        // Staging left by a crashed sync is garbage: only a lock holder writes there.
        try clearStaging()
        StrayTemporaries.remove(in: layout)

        var state = try StoreState.load(layout)
        let record = try ActiveRecord.load(layout)
        let inputs = evaluationInputs()
        let source = manifestURL.absoluteString
        let sameSource = state.manifestURL == source
        if sameSource, options.minInterval > 0, let lastCheck = state.lastCheck,
            now().timeIntervalSince(lastCheck) < options.minInterval, state.evaluatedInputs == inputs
        {
            options.events?(.skippedRecentCheck)
            return report(.skipped, record.current)
        }
        state.lastAttempt = now()

        // Check and accept: signature, format, freeze, rollback (with one uncached retry).
        let checked = try await checkAndAccept(state: state, sameSource: sameSource)
        let (response, bytes, signature, manifest) = (checked.response, checked.bytes, checked.signature, checked.manifest)
        var requests = checked.requests
        if case .fetched(_, let etag, let lastModified) = response {
            state.etag = etag
            state.lastModified = lastModified
        }
        FailPoint.afterManifest.hit()
        let digest = SHA256.hash(bytes).hex
        let unchanged = sameSource && digest == state.acceptedManifestSHA256 && state.evaluatedInputs == inputs
        state.accept(AcceptedManifest(sequence: manifest.sequence, sha256: digest), from: source)
        state.lastCheck = now()
        if checked.signatureFromNetwork, let signature {
            try FileSystem.writeAtomically(signature, to: layout.storedSignature)
        } else if signature == nil {
            // A signature left from an older manifest would not match the new one.
            FileSystem.removeFile(layout.storedSignature)
        }
        if case .fetched = response { try FileSystem.writeAtomically(bytes, to: layout.storedManifest) }
        if unchanged {
            // Same bytes, same local inputs, and the last evaluation finished: nothing to do.
            state.noteSuccess(at: now())
            try state.save(layout)
            return report(response.isNotModified ? .notModified : .upToDate, record.current, requests: requests)
        }
        // Until this release is fully active, a 304 must not count as "evaluated".
        state.evaluatedInputs = nil

        // Plan.
        let plan = planner(deviceID: try Rollout.deviceID(layout), state: state).plan(manifest, current: record.current)
        announce(plan, manifest: manifest, current: record.current)
        state.heldBack = plan.heldBack
        // A reverted release stays blocked only while the manifest still offers that very version.
        state.reverted = state.reverted?.filter { id, version in
            manifest.packages.contains { $0.id == id && $0.version == version }
        }
        // The accepted sequence (rollback protection) is on disk before anything is downloaded.
        try state.save(layout)
        try checkFreeSpace(for: plan.toInstall)

        // Fetch and install, in parallel; a failure of one does not stop the others.
        let installed = try await install(plan.toInstall, current: record.current)
        requests += installed.requests

        // Switch (unless SIGINT/SIGTERM came while fetching: then the active set stays as it was).
        try Task.checkCancellation()
        var outcome = SyncReport.Outcome.upToDate
        var current = record.current
        let candidate = ActiveSet(
            generation: record.current.generation + 1, sequence: manifest.sequence, activatedAt: now(), packages: plan.packages)
        if !candidate.hasSameContent(as: record.current) {
            // Every tree it names was flushed and renamed into place by the install stage's commit.
            FailPoint.beforeSwitch.hit()
            try ActiveRecord(current: candidate, previous: record.current.generation == 0 ? record.previous : record.current)
                .save(layout)
            FailPoint.afterSwitch.hit()
            History.record(candidate, limit: options.historyLimit, in: layout)
            current = candidate
            outcome = .activated
            options.events?(.activated(generation: candidate.generation))
        }
        var changes = Self.changes(from: record.current, to: current, via: installed.via)
        for index in changes.indices where changes[index].to != nil {
            changes[index].bytes = installed.bytesByPackage[changes[index].id] ?? 0
        }
        if outcome == .activated { state.lastChanges = changes }
        state.evaluatedInputs = inputs
        state.noteSuccess(at: now())
        // The switch is done: failing to note that the evaluation finished only costs a re-evaluation
        // at the next 304, and must not turn a switched release into a non-zero exit.
        try? state.save(layout)

        // Clean up: only after success, so a failed sync keeps what it verified.
        _ = try? GarbageCollector(layout: layout).collect()

        var report = report(outcome, current, requests: requests)
        report.changes = changes
        report.mandatory = report.changes.contains { $0.mandatory == true }
        report.heldBack = plan.heldBack
        report.bytesFetched = installed.bytes
        return report
    }

    /// `sync --dry-run` (SPEC §12): everything up to the plan — the manifest fetched and verified — and
    /// nothing written: no lock, no state, no stored manifest, no device ID, no download.
    package func plan() async throws -> SyncPlan {
        let state = (try? StoreState.load(layout)) ?? StoreState()
        let record = (try? ActiveRecord.load(layout)) ?? .empty
        let source = manifestURL.absoluteString
        let checked = try await checkAndAccept(state: state, sameSource: state.manifestURL == source)
        let manifest = checked.manifest
        // A root without a device ID gets one at its first real sync; until then rollout is judged with
        // a throwaway ID, which is what that first sync will do with its new one.
        let deviceID = Rollout.existingDeviceID(layout) ?? UUID().uuidString.lowercased()
        let plan = planner(deviceID: deviceID, state: state).plan(manifest, current: record.current)
        let candidate = ActiveSet(generation: record.current.generation + 1, sequence: manifest.sequence, activatedAt: now(), packages: plan.packages)
        var steps = [SyncPlan.Step]()
        for package in plan.packages {
            let before = record.current.package(package.id)
            guard before?.version != package.version || before?.tree != package.tree else { continue }
            var via = "cache"
            var bytes: Int64 = 0
            if let entry = plan.toInstall.first(where: { $0.id == package.id }) {
                if let before, let delta = entry.deltas.first(where: { $0.from == before.version }) {
                    (via, bytes) = ("delta", delta.file.size)
                } else {
                    (via, bytes) = ("archive", entry.archive.size)
                }
                if let files = await installer.estimateFiles(entry, manifestURL: manifestURL, current: record.current) {
                    (via, bytes) = ("files", files)
                }
            }
            steps.append(
                .init(
                    id: package.id, from: before?.version, to: package.version, via: via, bytes: bytes, notes: package.notes,
                    mandatory: package.mandatory))
        }
        for package in record.current.packages where candidate.package(package.id) == nil {
            steps.append(.init(id: package.id, from: package.version, to: nil, via: nil, bytes: 0))
        }
        return SyncPlan(
            manifestURL: source, sequence: manifest.sequence, wouldActivate: !candidate.hasSameContent(as: record.current),
            steps: steps, heldBack: plan.heldBack, bytesToFetch: steps.reduce(0) { $0 + $1.bytes },
            mandatory: steps.contains { $0.mandatory == true })
    }

    private func planner(deviceID: String, state: StoreState) -> ReleasePlanner {
        ReleasePlanner(
            layout: layout, shellVersion: options.shellVersion.flatMap(ShellVersion.init), deviceID: deviceID,
            reverted: state.reverted ?? [:])
    }

    /// Events for what the plan holds back and for each release it will install.
    private func announce(_ plan: ReleasePlan, manifest: Manifest, current: ActiveSet) {
        for held in plan.heldBack {
            options.events?(.heldBack(packageID: held.id, version: held.version, reason: held.reason))
        }
        for package in plan.packages where current.package(package.id)?.version != package.version {
            options.events?(
                .releaseAvailable(
                    packageID: package.id, version: package.version, notes: package.notes, mandatory: package.mandatory ?? false))
        }
    }

    private struct Checked {
        var response: ManifestFetcher.Response
        var bytes: [UInt8]
        var signature: [UInt8]?
        var signatureFromNetwork: Bool
        var requests: Int
        var manifest: Manifest
    }

    /// Check, then accept. A manifest refused as a rollback, or a fresh one whose signature does not
    /// verify, may be a CDN edge that holds an old copy of one of the two files: both are fetched once
    /// more with `Cache-Control: no-cache` before the refusal stands (SPEC §12).
    private func checkAndAccept(state: StoreState, sameSource: Bool) async throws -> Checked {
        var checked = try await check(conditionally: sameSource ? state : nil, uncached: false)
        do {
            checked.manifest = try accept(checked.bytes, signature: checked.signature, state: state)
            return checked
        } catch let error as OfflinePkgError {
            switch error {
            case .manifestRollback: break
            case .signatureRefused where !checked.response.isNotModified: break
            default: throw error
            }
            options.events?(.retryingUncached(reason: "\(error)"))
            var again = try await check(conditionally: nil, uncached: true)
            again.requests += checked.requests
            again.manifest = try accept(again.bytes, signature: again.signature, state: state)
            return again
        }
    }

    /// The check stage: the manifest (conditionally, with the validators of `stored`, if any) and, when
    /// keys are configured, its signature. A 304 brings back the stored copy.
    private func check(conditionally stored: StoreState?, uncached: Bool) async throws -> Checked {
        let fetcher = ManifestFetcher(
            transport: transport, retry: options.retry, limits: options.retrievalLimits, deadline: options.manifestDeadline,
            caBundle: options.caBundle)
        options.events?(.checking(manifestURL: manifestURL.absoluteString))
        let response = try await fetcher.fetchManifest(
            manifestURL, etag: stored?.etag, lastModified: stored?.lastModified, uncached: uncached)
        var requests = 1
        let bytes: [UInt8]
        var signature: [UInt8]?
        switch response {
        case .notModified:
            options.events?(.manifestUnchanged)
            bytes = try FileSystem.read(layout.storedManifest, limit: Manifest.maximumSize)
            // Keys configured after the stored manifest was taken unsigned: its signature is fetched.
            signature = try? FileSystem.read(layout.storedSignature, limit: 64 << 10)
        case .fetched(let fetched, _, _):
            bytes = fetched
        }
        var fromNetwork = false
        if signature == nil && !options.trustedKeys.isEmpty {
            signature = try await fetcher.fetchSignature(manifestURL, uncached: uncached)
            fromNetwork = true
            requests += 1
            // An edge that cached `.minisig` at another time than the manifest: the copy named after the
            // manifest's own hash cannot be out of step with it.
            if !verifies(bytes, signature) {
                let url = ManifestFetcher.immutableSignatureURL(of: manifestURL, manifestSHA256: SHA256.hash(bytes).hex)
                requests += 1
                if let immutable = try? await fetcher.fetchSignature(at: url), verifies(bytes, immutable) {
                    signature = immutable
                }
            }
        }
        return Checked(
            response: response, bytes: bytes, signature: signature, signatureFromNetwork: fromNetwork, requests: requests,
            manifest: Manifest(sequence: 1, packages: []))
    }

    private func verifies(_ bytes: [UInt8], _ signature: [UInt8]?) -> Bool {
        guard let signature else { return false }
        return
            (try? SignatureVerifier.verify(
                message: bytes, signature: signature, keys: options.trustedKeys, source: manifestURL.absoluteString)) != nil
    }

    /// What the stored manifest was judged with: a change of either re-evaluates it after a 304.
    private func evaluationInputs() -> String {
        let keys = options.trustedKeys.map(\.keyID).sorted().joined(separator: ",")
        return "shell=\(options.shellVersion ?? "*");keys=\(keys);limits=\(limits.maxEntries)/\(limits.maxBytes)"
    }

    private func accept(_ bytes: [UInt8], signature: [UInt8]?, state: StoreState) throws -> Manifest {
        let source = manifestURL.absoluteString
        if !options.trustedKeys.isEmpty {
            guard let signature else {
                throw OfflinePkgError.signatureRefused(
                    source: source, reason: "no signature at \(source).minisig, and trusted keys are configured")
            }
            _ = try SignatureVerifier.verify(message: bytes, signature: signature, keys: options.trustedKeys, source: source)
        }
        let manifest = try Manifest(parsing: bytes, source: source)
        if let expires = manifest.expires, expires <= now() {
            throw OfflinePkgError.manifestExpired(source: source, expires: RFC3339.format(expires))
        }
        // Per manifest URL: another URL is another channel, with a history of its own.
        if let accepted = state.accepted(from: source)?.sequence {
            if manifest.sequence < accepted {
                throw OfflinePkgError.manifestRollback(
                    source: source, reason: "sequence \(manifest.sequence) is lower than the accepted \(accepted)")
            }
            if manifest.sequence == accepted, let digest = state.accepted(from: source)?.sha256, digest != SHA256.hash(bytes).hex {
                throw OfflinePkgError.manifestRollback(
                    source: source, reason: "sequence \(accepted) was accepted before with other content")
            }
        }
        return manifest
    }

    private func clearStaging() throws {
        for name in FileSystem.contents(of: layout.staging) {
            try FileSystem.removeTree(layout.stagingDirectory(name))
        }
    }

    private func report(_ outcome: SyncReport.Outcome, _ set: ActiveSet, requests: Int = 0) -> SyncReport {
        SyncReport(
            outcome: outcome, generation: set.generation, sequence: set.sequence, changes: [], heldBack: [], bytesFetched: 0,
            requests: requests)
    }

    private static func changes(from old: ActiveSet, to new: ActiveSet, via: [String: String]) -> [SyncReport.Change] {
        var changes = [SyncReport.Change]()
        for package in new.packages {
            let before = old.package(package.id)
            if before?.version != package.version || before?.tree != package.tree {
                changes.append(
                    .init(
                        id: package.id, from: before?.version, to: package.version, via: via[package.id] ?? "cache",
                        notes: package.notes, mandatory: package.mandatory))
            }
        }
        for package in old.packages where new.package(package.id) == nil {
            changes.append(.init(id: package.id, from: package.version, to: nil, via: nil))
        }
        return changes
    }
}

extension ManifestFetcher.Response {
    fileprivate var isNotModified: Bool {
        if case .notModified = self { return true }
        return false
    }
}
