import FoundationEssentials

/// The stages of one sync, in the order `SyncEngine.runLocked` runs them; each returns the typed value the
/// next one takes.
extension SyncEngine {
    /// What a locked sync starts from: the root's state and active record as they are on disk.
    struct Start {
        var state: SyncState
        var record: ActiveRecord
        /// What the stored manifest is judged with now (`evaluationInputs(_:)`).
        var inputs: String
        /// Whether the last manifest came from this same URL (conditional requests, "unchanged").
        var sameSource: Bool
    }

    /// Begin: an open root of an older offlinepkg is made its user's alone (`RootModes`), leftovers of a
    /// crashed sync go (staging is garbage: only a lock holder writes there), the
    /// content store catches up (a root in the older layout gets the current one, the last one-package sync's
    /// new content is taken in), then the state and the active record are read. A dry run only reads,
    /// and a root it cannot read (or that is not there) starts it from nothing.
    func begin(dryRun: Bool = false) throws -> Start {
        let state: SyncState
        let record: ActiveRecord
        if dryRun {
            state = (try? SyncState.load(layout)) ?? SyncState()
            record = (try? ActiveRecord.load(layout)) ?? .empty
        } else {
            RootModes.tighten(layout)
            try Staging(layout: layout).clear()
            StrayTemporaries.remove(in: layout)
            PackageInstaller.contentStore(layout).catchUp()
            state = try SyncState.load(layout)
            record = try ActiveRecord.load(layout)
        }
        return Start(
            state: state, record: record, inputs: evaluationInputs(try resolveTrust(state)),
            sameSource: state.manifestURL == source)
    }

    /// `--min-interval`: no request when the last successful check is young and nothing local changed.
    func skipIfCheckedRecently(_ start: Start) -> SyncReport? {
        guard start.sameSource, options.minInterval > 0, let lastCheck = start.state.lastCheck,
            now().timeIntervalSince(lastCheck) < options.minInterval, start.state.evaluatedInputs == start.inputs
        else { return nil }
        options.events?(.skippedRecentCheck)
        return emptyReport(.skipped, start.record.current)
    }

    /// A manifest that passed every check (signature, format, freeze, rollback), and the state that
    /// accepting it makes (validators, accepted sequence, check time), not saved yet.
    struct AcceptedRelease {
        var start: Start
        var checked: CheckedManifest
        var manifest: Manifest
        var state: SyncState
        /// Same bytes, same local inputs, and the last evaluation finished: nothing to do.
        var unchanged: Bool
    }

    /// Check and accept, then keep the manifest and its signatures in the root (the copy a 304 brings
    /// back); a dry run keeps nothing. A signed manifest accepted makes the root remember what it was signed
    /// under (docs/protocol.md#keys-documents).
    func accept(_ start: Start, dryRun: Bool = false) async throws -> AcceptedRelease {
        var state = start.state
        state.lastAttempt = now()
        let (checked, manifest, trust) = try await checkAndAccept(state: &state, sameSource: start.sameSource, commit: !dryRun)
        attempt?.accepted(manifest)
        if case .fetched(_, let etag, let lastModified) = checked.response {
            state.etag = etag
            state.lastModified = lastModified
        }
        var start = start
        let unchanged =
            start.sameSource && checked.sha256 == state.acceptedManifestSHA256 && state.evaluatedInputs == start.inputs
        // A keys version followed in this sync is what the manifest is judged with from now on.
        start.inputs = evaluationInputs(trust)
        let keysVersion = trust.anchor?.document == nil ? nil : manifest.keysVersion
        state.accept(
            AcceptedManifest(
                sequence: manifest.sequence, sha256: checked.sha256, keysVersion: keysVersion,
                manifestKeys: trust.anchor?.manifestRole.fingerprint),
            from: source)
        if let anchor = trust.anchor { state.remember(anchor, for: source, at: now()) }
        state.lastCheck = now()
        let accepted = AcceptedRelease(start: start, checked: checked, manifest: manifest, state: state, unchanged: unchanged)
        if dryRun { return accepted }
        FailPoint.afterManifest.hit()
        if checked.signatureFromNetwork, let signature = checked.signature {
            try FileSystem.writeAtomically(signature, to: layout.storedSignature)
        } else if checked.signature == nil {
            // A signature left from an older manifest would not match the new one.
            FileSystem.discardFile(layout.storedSignature)
        }
        if checked.signaturesFromNetwork {
            let texts = checked.signatures.map { String(decoding: Base64.encode($0), as: UTF8.self) }
            try FileSystem.writeAtomically(JSONCoding.encode(texts), to: layout.storedSignatures)
        } else if checked.signatures.isEmpty {
            FileSystem.discardFile(layout.storedSignatures)
        }
        if case .fetched = checked.response { try FileSystem.writeAtomically(checked.bytes, to: layout.storedManifest) }
        return accepted
    }

    /// The commit of an unchanged manifest: the check noted as a success, and the sync ends.
    func finishUnchanged(_ accepted: AcceptedRelease) throws -> SyncReport {
        var state = accepted.state
        state.noteSuccess(at: now())
        // After a 304 only the times and the failure count changed: a power cut that takes them back
        // costs the next timer run its --min-interval skip, nothing else. Two fsyncs fewer per no-op sync.
        let notModified = accepted.checked.response.isNotModified
        try state.save(layout, durable: !notModified)
        let outcome: SyncReport.Outcome = notModified ? .notModified : .upToDate
        return emptyReport(outcome, accepted.start.record.current, requests: accepted.checked.requests)
    }

    /// The release as planned, and the state committed with it.
    struct PlannedRelease {
        var accepted: AcceptedRelease
        var plan: ReleasePlan
        var state: SyncState
        var current: ActiveSet { accepted.start.record.current }

        /// The active set this release would switch in.
        func candidate(activatedAt: Date) -> ActiveSet {
            ActiveSet(
                generation: current.generation + 1, sequence: accepted.manifest.sequence, activatedAt: activatedAt,
                packages: plan.packages)
        }
    }

    /// Plan: gating and what to fetch. Commits the accepted sequence (rollback protection) and the
    /// hold-backs before anything is downloaded, with the evaluation marked unfinished (a 304 must not
    /// count as evaluated until this release is fully active); then the free-space check. A dry run
    /// commits nothing, announces nothing and checks no space; a root without a device ID is judged for
    /// rollout with a throwaway one, which is what its first sync will do with its new one.
    func plan(_ accepted: AcceptedRelease, dryRun: Bool = false) throws -> PlannedRelease {
        let manifest = accepted.manifest
        let current = accepted.start.record.current
        let deviceID = dryRun ? DeviceID.existing(layout) ?? UUID().uuidString.lowercased() : try DeviceID.of(layout)
        let plan = planner(deviceID: deviceID, state: accepted.state).plan(manifest, current: current)
        if dryRun { return PlannedRelease(accepted: accepted, plan: plan, state: accepted.state) }
        announce(plan, manifest: manifest, current: current)
        if let attempt {
            let candidate = ActiveSet(generation: current.generation + 1, sequence: manifest.sequence, activatedAt: now(), packages: plan.packages)
            attempt.planned(Self.changes(from: current, to: candidate, routes: [:], bytes: [:]))
        }
        var state = accepted.state
        state.evaluatedInputs = nil
        state.heldBack = plan.heldBack
        // A reverted release stays blocked only while the manifest still offers that very version.
        let offered = { (id: String, version: String) in manifest.packages.contains { $0.id == id && $0.version == version } }
        state.reverted = state.reverted?.filter { offered($0.key, $0.value) }
        state.rolledBack = state.rolledBack?.filter { offered($0.key, $0.value) }
        try state.save(layout)
        try checkFreeSpace(for: plan.toInstall)
        return PlannedRelease(accepted: accepted, plan: plan, state: state)
    }

    /// The active set after the switch stage, and whether it changed.
    struct SwitchedSet {
        var previous: ActiveSet
        var current: ActiveSet
        var outcome: SyncReport.Outcome
        /// What changed, with how each package came and what it cost.
        var changes: [SyncReport.Change] = []
    }

    /// Switch (unless SIGINT/SIGTERM came while fetching: then the active set stays as it was), then
    /// commit the finished evaluation. Runs only after the install stage returned: every package verified.
    func switchSet(_ planned: PlannedRelease, _ installed: InstalledPackages) throws -> SwitchedSet {
        try Task.checkCancellation()
        let record = planned.accepted.start.record
        var switched = SwitchedSet(previous: record.current, current: record.current, outcome: .upToDate)
        let candidate = planned.candidate(activatedAt: now())
        if !candidate.hasSameContent(as: record.current) {
            // Every tree it names was flushed and renamed into place by the install stage's commit.
            FailPoint.beforeSwitch.hit()
            try ActiveRecord(current: candidate, previous: record.current.generation == 0 ? record.previous : record.current)
                .save(layout)
            FailPoint.afterSwitch.hit()
            History.record(candidate, limit: options.historyLimit, in: layout)
            switched.current = candidate
            switched.outcome = .activated
            options.events?(.activated(generation: candidate.generation))
        }
        switched.changes = Self.changes(
            from: switched.previous, to: switched.current, routes: installed.routes, bytes: installed.bytesByPackage)
        var state = planned.state
        if switched.outcome == .activated { state.lastChanges = switched.changes }
        state.evaluatedInputs = planned.accepted.start.inputs
        state.noteSuccess(at: now())
        // The switch is done: failing to note that the evaluation finished only costs a re-evaluation
        // at the next 304, and must not turn a switched release into a non-zero exit.
        try? state.save(layout)
        return switched
    }

    /// Clean up: only after success, so a failed sync keeps what it verified.
    func cleanUp() {
        _ = try? GarbageCollector(layout: layout).collect()
    }

    func report(_ switched: SwitchedSet, _ planned: PlannedRelease, _ installed: InstalledPackages) -> SyncReport {
        var report = emptyReport(
            switched.outcome, switched.current, requests: planned.accepted.checked.requests + installed.requests)
        report.changes = switched.changes
        report.mandatory = report.changes.contains { $0.mandatory == true }
        report.heldBack = planned.plan.heldBack
        report.bytesFetched = installed.bytes
        return report
    }
}
