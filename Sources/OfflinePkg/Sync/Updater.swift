import FoundationEssentials
import Synchronization

/// Keeps a cache root up to date from one manifest URL (the library of README.md, "In a host app"). At most one sync runs at a time per
/// updater; a `sync()` called while one is in flight joins it.
///
/// The one sync path: a host's `Updater(store:)` and the `sync` command's `Updater(root:)` run the same
/// `sync()`, with the same events (`.failed` included) and the same activation notice to the root's
/// reader, if it has one in this process.
public actor Updater {
    /// The root this updater writes.
    public nonisolated let root: CacheRoot
    public let manifestURL: URL
    public let options: Options
    // The shortest period of background updates; tests shorten it to see the loop turn in seconds.
    private let minimumPeriod: TimeInterval
    private var inFlight: Task<SyncReport, Error>?
    /// The install reports' send in flight (docs/protocol.md#install-reports), started after a sync; a sync's result never waits
    /// for it.
    var sending: Task<Void, Never>?
    // Behind a lock rather than actor state, so that start() and stop() take effect before they return:
    // when each handed its work to the actor in a task of its own, a stop() could reach the actor first
    // and find nothing to stop, and the loop then ran for good.
    private let background = Mutex<Task<Void, Never>?>(nil)

    public init(store: PackageStore, manifestURL: URL, options: Options = .init()) {
        self.init(root: CacheRoot(store: store), manifestURL: manifestURL, options: options)
    }

    /// An updater of `root`, whose world (clock and network) its syncs use. A root opened alone (the
    /// `sync` command's) has no reader in this process: no lookup index built from every tree listing,
    /// before and again after a switch, and no reader lease.
    package init(root: CacheRoot, manifestURL: URL, options: Options, minimumPeriod: TimeInterval = 60) {
        self.root = root
        self.manifestURL = manifestURL
        self.options = options
        self.minimumPeriod = minimumPeriod
    }

    package init(store: PackageStore, manifestURL: URL, options: Options, world: World, minimumPeriod: TimeInterval = 60) {
        self.init(
            root: CacheRoot(store: store, world: world), manifestURL: manifestURL, options: options, minimumPeriod: minimumPeriod)
    }

    /// The reader this updater tells of its switches (the store it was made with), if any.
    public nonisolated var store: PackageStore? { root.store }

    /// Checks the manifest and, if it asks for something new, downloads, verifies and activates it.
    /// Cancelling the caller that started the sync cancels it (the active set then stays as it was); a
    /// caller that joined a sync in flight only stops waiting for it.
    public func sync() async throws -> SyncReport { try await sync(forwardingCancellation: true) }

    /// The background loop passes false: `stop()` cancels the loop, and a sync in flight finishes.
    private func sync(forwardingCancellation: Bool) async throws -> SyncReport {
        if let inFlight { return try await inFlight.value }
        let attempt = SyncAttempt()
        let started = ContinuousClock.now
        var engine = engine()
        engine.attempt = attempt
        let task = Task { [engine] in try await engine.run() }
        inFlight = task
        defer { inFlight = nil }
        do {
            let report =
                forwardingCancellation
                ? try await withTaskCancellationHandler { try await task.value } onCancel: { task.cancel() }
                : try await task.value
            if report.outcome == .activated { root.switched() }
            // The switch is done and announced before anything is reported.
            recordReport(.success(report), attempt: attempt, started: started)
            return report
        } catch {
            // Where a failed sync is recorded: the root's monitoring state (`status --json`), the event, then
            // its install report. An interrupted sync is noted by whoever interrupted it, who knows the signal.
            if !task.isCancelled { root.recordFailure(error) }
            if let error = error as? OfflinePkgError {
                options.events?(.failed(error))
                if !task.isCancelled { recordReport(.failure(error), attempt: attempt, started: started) }
            }
            throw error
        }
    }

    /// What a sync would do now (`sync --dry-run`, man/offlinepkg.1): the same stages as `sync()` up to the plan, the
    /// manifest fetched and verified, then what the install stage would fetch, and how. Nothing is
    /// downloaded and nothing in the root changes; the root need not exist.
    public func plan() async throws -> SyncPlan {
        try await engine().dryRun()
    }

    private func engine() -> SyncEngine {
        SyncEngine(layout: root.layout, manifestURL: manifestURL, options: options, world: root.world)
    }

    /// Starts background updates: a sync now, then every `minInterval` (at least a minute) plus jitter.
    /// Failures are reported through `options.events` and retried at the next period.
    nonisolated public func start() {
        let period = max(minimumPeriod, options.minInterval)
        let jitter = options.jitter
        background.withLock { background in
            guard background == nil else { return }
            background = Task { [weak self] in
                // Ends when stopped, or at the first turn after the updater is gone (released without
                // stop()); the updater is held only while it syncs, not while the loop sleeps.
                while !Task.isCancelled {
                    do {
                        guard let updater = self else { return }
                        _ = try? await updater.sync(forwardingCancellation: false)
                    }
                    let wait = period + (jitter > 0 ? Double.random(in: 0...jitter) : 0)
                    try? await Task.sleep(nanoseconds: UInt64(wait * 1_000_000_000))
                }
            }
        }
    }

    /// Ends background updates; a sync in flight finishes.
    nonisolated public func stop() {
        background.withLock { background in
            background?.cancel()
            background = nil
        }
    }
}
