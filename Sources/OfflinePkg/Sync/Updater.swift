import Foundation
import Synchronization

/// Keeps a cache root up to date from one manifest URL (SPEC §9). At most one sync runs at a time per
/// updater; a `sync()` called while one is in flight joins it.
public actor Updater {
    public let store: PackageStore
    public let manifestURL: URL
    public let options: Options
    private let transport: any Transport
    // The shortest period of background updates; tests shorten it to see the loop turn in seconds.
    private let minimumPeriod: TimeInterval
    private var inFlight: Task<SyncReport, Error>?
    // Behind a lock rather than actor state, so that start() and stop() take effect before they return:
    // when each handed its work to the actor in a task of its own, a stop() could reach the actor first
    // and find nothing to stop, and the loop then ran for good.
    private let background = Mutex<Task<Void, Never>?>(nil)

    public init(store: PackageStore, manifestURL: URL, options: Options = .init()) {
        self.init(store: store, manifestURL: manifestURL, options: options, transport: CurlTransport())
    }

    package init(
        store: PackageStore, manifestURL: URL, options: Options, transport: any Transport,
        minimumPeriod: TimeInterval = 60
    ) {
        self.store = store
        self.manifestURL = manifestURL
        self.options = options
        self.transport = transport
        self.minimumPeriod = minimumPeriod
    }

    /// Checks the manifest and, if it asks for something new, downloads, verifies and activates it.
    public func sync() async throws -> SyncReport {
        if let inFlight { return try await inFlight.value }
        let engine = SyncEngine(
            layout: store.layout, manifestURL: manifestURL, options: options, limits: store.options.unpackLimits,
            transport: transport)
        let task = Task { try await engine.run() }
        inFlight = task
        defer { inFlight = nil }
        do {
            let report = try await task.value
            if report.outcome == .activated { store.activated() }
            return report
        } catch let error as OfflinePkgError {
            options.events?(.failed(error))
            throw error
        }
    }

    /// What a sync would do now (SPEC §12 `--dry-run`): the manifest is fetched and verified, nothing
    /// is downloaded and nothing in the root changes.
    public func plan() async throws -> SyncPlan {
        try await SyncEngine(
            layout: store.layout, manifestURL: manifestURL, options: options, limits: store.options.unpackLimits,
            transport: transport
        ).plan()
    }

    /// `plan()` for a process that reads nothing from the root (`sync --dry-run`); the root need not exist.
    package static func planOnce(
        root: String, manifestURL: URL, options: Options, transport: any Transport = CurlTransport()
    ) async throws -> SyncPlan {
        let layout = CacheLayout(root: (try? FileSystem.realPath(root)) ?? root)
        return try await SyncEngine(
            layout: layout, manifestURL: manifestURL, options: options, limits: .init(), transport: transport
        ).plan()
    }

    /// Notes a sync that ended outside the engine (interrupted by a signal, or failed before it started)
    /// in the root's monitoring state; see `StoreState.recordFailure`.
    package static func recordFailure(root: String, exitStatus: Int32, message: String) {
        StoreState.recordFailure(SyncFailure(time: Date(), exitStatus: exitStatus, message: message), in: CacheLayout(root: root))
    }

    /// One sync of the cache root at `root` for a process that reads nothing from it, such as the
    /// `sync` command: no `PackageStore`, so no lookup index built from every tree listing (before and
    /// again after a switch) and no reader lease. That was most of the time of a sync that finds the
    /// manifest unchanged.
    package static func syncOnce(
        root: String, manifestURL: URL, options: Options, limits: UnpackLimits = .init(),
        transport: any Transport = CurlTransport()
    ) async throws -> SyncReport {
        try CacheLayout(root: root).prepare()
        // As PackageStore does: libarchive's secure-symlink check refuses a target path through a link,
        // so the root's own links are resolved first.
        let layout = CacheLayout(root: try FileSystem.realPath(root))
        return try await SyncEngine(
            layout: layout, manifestURL: manifestURL, options: options, limits: limits, transport: transport
        )
        .run()
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
                        _ = try? await updater.sync()
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
