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
        // Staging left by a crashed sync is garbage: only a lock holder writes there.
        try clearStaging()
        StrayTemporaries.remove(in: layout)

        var state = try StoreState.load(layout)
        let record = try ActiveRecord.load(layout)
        let inputs = evaluationInputs()
        let sameSource = state.manifestURL == manifestURL.absoluteString
        if sameSource, options.minInterval > 0, let lastCheck = state.lastCheck,
            now().timeIntervalSince(lastCheck) < options.minInterval, state.evaluatedInputs == inputs
        {
            options.events?(.skippedRecentCheck)
            return report(.skipped, record.current)
        }

        // Check.
        let checked = try await check(conditionally: sameSource ? state : nil)
        let (response, bytes, signature) = (checked.response, checked.bytes, checked.signature)
        var requests = checked.requests
        if case .fetched(_, let etag, let lastModified) = response {
            state.etag = etag
            state.lastModified = lastModified
        }

        // Accept: signature, format, freeze, rollback.
        let manifest = try accept(bytes, signature: signature, state: state)
        FailPoint.afterManifest.hit()
        let digest = SHA256.hash(bytes).hex
        let unchanged = digest == state.acceptedManifestSHA256 && state.evaluatedInputs == inputs
        state.manifestURL = manifestURL.absoluteString
        state.acceptedSequence = manifest.sequence
        state.acceptedManifestSHA256 = digest
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
            try state.save(layout)
            return report(response.isNotModified ? .notModified : .upToDate, record.current, requests: requests)
        }
        // Until this release is fully active, a 304 must not count as "evaluated".
        state.evaluatedInputs = nil

        // Plan.
        let planner = ReleasePlanner(
            layout: layout, shellVersion: options.shellVersion.flatMap(ShellVersion.init),
            deviceID: try Rollout.deviceID(layout), reverted: state.reverted ?? [:])
        let plan = planner.plan(manifest, current: record.current)
        for held in plan.heldBack {
            options.events?(.heldBack(packageID: held.id, version: held.version, reason: held.reason))
        }
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

        // Switch.
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
        state.evaluatedInputs = inputs
        // The switch is done: failing to note that the evaluation finished only costs a re-evaluation
        // at the next 304, and must not turn a switched release into a non-zero exit.
        try? state.save(layout)

        // Clean up: only after success, so a failed sync keeps what it verified.
        _ = try? GarbageCollector(layout: layout).collect()

        var report = report(outcome, current, requests: requests)
        report.changes = Self.changes(from: record.current, to: current, via: installed.via)
        report.heldBack = plan.heldBack
        report.bytesFetched = installed.bytes
        return report
    }

    /// The check stage: the manifest (conditionally, with the validators of `stored`, if any) and, when
    /// keys are configured, its signature. A 304 brings back the stored copy.
    private func check(conditionally stored: StoreState?) async throws
        -> (response: ManifestFetcher.Response, bytes: [UInt8], signature: [UInt8]?, signatureFromNetwork: Bool, requests: Int)
    {
        let fetcher = ManifestFetcher(
            transport: transport, retry: options.retry, limits: options.retrievalLimits, deadline: options.manifestDeadline,
            caBundle: options.caBundle)
        options.events?(.checking(manifestURL: manifestURL.absoluteString))
        let response = try await fetcher.fetchManifest(manifestURL, etag: stored?.etag, lastModified: stored?.lastModified)
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
            signature = try await fetcher.fetchSignature(manifestURL)
            fromNetwork = true
            requests += 1
        }
        return (response, bytes, signature, fromNetwork, requests)
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
        if let accepted = state.acceptedSequence {
            if manifest.sequence < accepted {
                throw OfflinePkgError.manifestRollback(
                    source: source, reason: "sequence \(manifest.sequence) is lower than the accepted \(accepted)")
            }
            if manifest.sequence == accepted, let digest = state.acceptedManifestSHA256, digest != SHA256.hash(bytes).hex {
                throw OfflinePkgError.manifestRollback(
                    source: source, reason: "sequence \(accepted) was accepted before with other content")
            }
        }
        return manifest
    }

    private func checkFreeSpace(for entries: [PackageEntry]) throws {
        guard !entries.isEmpty else { return }
        let needed = SpaceEstimate.needed(for: entries, limits: limits)
        let available = try FileSystem.availableSpace(at: layout.root)
        if needed > available {
            throw OfflinePkgError.insufficientSpace(path: layout.root, needed: needed, available: available)
        }
    }

    private struct InstallResults {
        var via: [String: String] = [:]
        var bytes: Int64 = 0
        var requests = 0
    }

    /// `current` is the active set: the versions deltas can start from.
    private func install(_ entries: [PackageEntry], current: ActiveSet) async throws -> InstallResults {
        let installer = PackageInstaller(
            layout: layout,
            downloader: Downloader(
                transport: transport, layout: layout, retry: options.retry, limits: options.retrievalLimits,
                caBundle: options.caBundle),
            limits: limits, events: options.events)
        let manifestURL = self.manifestURL
        var results = InstallResults()
        var failures = [String: OfflinePkgError]()
        var staged = [StagedTree]()
        func record(_ id: String, _ result: Result<PackageInstaller.Outcome, OfflinePkgError>) {
            switch result {
            case .success(let outcome):
                staged.append(outcome.staged)
                results.via[id] = outcome.via
                results.bytes += outcome.bytesFetched
                results.requests += 1
            case .failure(let error):
                failures[id] = error
                options.events?(.packageFailed(packageID: id, error: error))
            }
        }
        let groups = Self.groupsSharingDownloads(entries)
        try await withThrowingTaskGroup(of: [(String, Result<PackageInstaller.Outcome, OfflinePkgError>)].self) { group in
            var pending = groups[...]
            func startNext() {
                guard let entries = pending.popFirst() else { return }
                group.addTask {
                    var outcomes = [(String, Result<PackageInstaller.Outcome, OfflinePkgError>)]()
                    for entry in entries {
                        do {
                            outcomes.append(
                                (
                                    entry.id,
                                    .success(try await installer.install(entry, manifestURL: manifestURL, current: current))
                                ))
                        } catch let error as OfflinePkgError {
                            outcomes.append((entry.id, .failure(error)))
                        }
                    }
                    return outcomes
                }
            }
            for _ in 0..<max(1, options.jobs) { startNext() }
            while let outcomes = try await group.next() {
                for (id, result) in outcomes { record(id, result) }
                startNext()
            }
        }
        // What verified is installed even when other packages failed: the next attempt fetches only those.
        try PackageInstaller.commit(staged, layout: layout)
        if !failures.isEmpty {
            throw failures.count == 1 ? failures.values.first! : OfflinePkgError.releaseIncomplete(failures: failures)
        }
        return results
    }

    /// Packages whose archives or deltas have the same sha256 share a download file
    /// (`downloads/<sha256>.part`): they are installed one after another, never side by side, so one
    /// never truncates or deletes the other's bytes. Everyone else goes in a group of one.
    static func groupsSharingDownloads(_ entries: [PackageEntry]) -> [[PackageEntry]] {
        var groups = [[PackageEntry]]()
        var groupOfFile = [String: Int]()
        for entry in entries {
            let files = [entry.archive.sha256] + entry.deltas.map(\.file.sha256)
            // Every group this entry touches becomes one (the first of them).
            let touched = Set(files.compactMap { groupOfFile[$0] }).sorted()
            let target = touched.first ?? groups.count
            if touched.isEmpty { groups.append([]) }
            for other in touched.dropFirst() {
                groups[target] += groups[other]
                groups[other] = []
                for (file, group) in groupOfFile where group == other { groupOfFile[file] = target }
            }
            groups[target].append(entry)
            for file in files { groupOfFile[file] = target }
        }
        return groups.filter { !$0.isEmpty }
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
                changes.append(.init(id: package.id, from: before?.version, to: package.version, via: via[package.id] ?? "cache"))
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
