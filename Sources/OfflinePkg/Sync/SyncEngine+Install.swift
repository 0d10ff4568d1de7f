import FoundationEssentials

/// The fetch-and-install stage of a sync: the free-space check before it, the downloads and unpacks
/// in a task group bounded by `--jobs`, and the one commit that makes every verified tree durable.
extension SyncEngine {
    /// Refuses, before anything is downloaded, a release whose archives and trees cannot fit.
    func checkFreeSpace(for entries: [PackageEntry]) throws {
        guard !entries.isEmpty else { return }
        let needed = SpaceEstimate.needed(for: entries, limits: limits)
        let available = try FileSystem.availableSpace(at: layout.root)
        if needed > available {
            throw OfflinePkgError.insufficientSpace(path: layout.root, needed: needed, available: available)
        }
    }

    /// What the install stage brought: how each package came, and what it cost on the network.
    struct InstalledPackages {
        var routes: [String: InstallRoute] = [:]
        /// What each package cost on the network.
        var bytesByPackage: [String: Int64] = [:]
        var bytes: Int64 = 0
        var requests = 0
    }

    /// The installer of this sync's packages.
    var installer: PackageInstaller { installer(defersNewContent: false) }

    func installer(defersNewContent: Bool) -> PackageInstaller {
        var installer = PackageInstaller(
            layout: layout,
            downloader: Downloader(
                transport: transport, layout: layout, retry: options.retry, limits: options.retrievalLimits,
                caBundle: options.caBundle),
            limits: limits, events: options.events)
        installer.defersNewContent = defersNewContent
        installer.origins = origins
        return installer
    }

    /// The newest file-index deltas of the active packages, fetched while the manifest is, when it is
    /// slow on an HTTP/2 origin (`EarlyRequests`), named from the manifest last accepted (its index URLs resolved against this
    /// sync's manifest URL: from another URL they are a guess like any other, checked all the same).
    func startEarlyRequests(_ start: Start) -> EarlyRequests {
        guard !start.record.current.packages.isEmpty, EarlyRequests.mayStart(manifestURL: manifestURL, origins: origins),
            let bytes = try? FileSystem.read(layout.storedManifest, limit: Manifest.maximumSize),
            let stored = try? Manifest(parsing: bytes, source: manifestURL.absoluteString)
        else { return .none }
        return EarlyRequests.start(
            installer, stored: stored, manifestURL: manifestURL, current: start.record.current, origins: origins,
            answer: manifestAnswer)
    }

    /// `current` is the active set: the versions deltas can start from.
    func install(_ entries: [PackageEntry], current: ActiveSet, early: EarlyRequests = .none) async throws
        -> InstalledPackages
    {
        let installer = {
            var installer = self.installer(defersNewContent: entries.count == 1)
            installer.early = early
            return installer
        }()
        let manifestURL = self.manifestURL
        var results = InstalledPackages()
        var failures = [String: OfflinePkgError]()
        var staged = [StagedTree]()
        func record(_ id: String, _ result: Result<PackageInstaller.Outcome, OfflinePkgError>) {
            switch result {
            case .success(let outcome):
                staged.append(outcome.staged)
                results.routes[id] = outcome.route
                results.bytesByPackage[id] = outcome.bytesFetched
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
        let (layout, verified) = (self.layout, staged)
        try await runBlocking { try Staging(layout: layout).commit(verified) }
        if !failures.isEmpty {
            throw failures.count == 1 ? failures.values.first! : OfflinePkgError.releaseIncomplete(failures: failures)
        }
        return results
    }

    /// What a dry run shows in place of the install stage: for each package to install, the route the
    /// installer would take and its bytes (`PackageInstaller.expectedRoute`), and the changes the switch
    /// would make, as a sync reports them.
    func preview(_ planned: PlannedRelease) async -> SyncPlan {
        let installer = self.installer
        var routes = [String: InstallRoute]()
        var bytes = [String: Int64]()
        for entry in planned.plan.toInstall {
            (routes[entry.id], bytes[entry.id]) = await installer.expectedRoute(entry, manifestURL: manifestURL, current: planned.current)
        }
        let candidate = planned.candidate(activatedAt: now())
        let changes = Self.changes(from: planned.current, to: candidate, routes: routes, bytes: bytes)
        let steps = changes.map {
            SyncPlan.Step(
                id: $0.id, from: $0.from, to: $0.to, via: $0.via, bytes: $0.bytes ?? 0, notes: $0.notes, mandatory: $0.mandatory)
        }
        return SyncPlan(
            manifestURL: source, sequence: planned.accepted.manifest.sequence,
            wouldActivate: !candidate.hasSameContent(as: planned.current), steps: steps, heldBack: planned.plan.heldBack,
            bytesToFetch: steps.reduce(0) { $0 + $1.bytes }, mandatory: steps.contains { $0.mandatory == true })
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
}
