import FoundationEssentials

/// A cache root opened for writing: the one owner of what changes in a root — its lock, its state,
/// syncs (an `Updater` runs them through it), rollback, garbage collection, verify and repair (see
/// `TreeRepairer`), launch records. A `PackageStore` only reads.
///
/// A switch made through a root opened on a reader (`init(store:)`, which is what `Updater(store:)`
/// does) reaches that reader at once: its `activations` stream yields before the call returns. Every
/// other reader, in this process or another, sees it within its `watchInterval`.
public struct CacheRoot: Sendable {
    package let layout: CacheLayout
    /// The reader of this process told of each switch at once; nil for a process that reads nothing
    /// (the `sync` command).
    private let reader: PackageStore?
    /// Reverts a newly activated set that the host has not confirmed (`confirmLaunch`) within this
    /// many launches (`recordLaunch`); 0 turns launch confirmation off.
    public var launchesBeforeRevert: Int
    /// The clock and network this root's syncs, repairs and records use.
    package let world: World

    /// Opens (and creates, if need be) the root at `root`, for a process that writes it without reading
    /// from it: no lookup index, no reader lease. Its folders are made by the first sync.
    public init(root: URL, launchesBeforeRevert: Int = 0) throws {
        try self.init(creating: root.path, launchesBeforeRevert: launchesBeforeRevert)
    }

    /// The root `store` reads, written from this process: each switch made here reaches `store` at once.
    public init(store: PackageStore, launchesBeforeRevert: Int = 0) {
        self.init(store: store, world: .live, launchesBeforeRevert: launchesBeforeRevert)
    }

    package init(store: PackageStore, world: World, launchesBeforeRevert: Int = 0) {
        self.init(layout: store.layout, reader: store, world: world, launchesBeforeRevert: launchesBeforeRevert)
    }

    /// The root at `path`, made if it is not there.
    package init(creating path: String, world: World = .live, launchesBeforeRevert: Int = 0) throws {
        try CacheLayout(root: path).writing { try FileSystem.makeDirectories(path) }
        // libarchive's secure-symlink check walks the whole target path: resolve the root's own links,
        // as PackageStore does.
        let resolved = try FileSystem.realPath(path)
        try RootModes.checkOwner(resolved)
        self.init(layout: CacheLayout(root: resolved), world: world, launchesBeforeRevert: launchesBeforeRevert)
    }

    package init(layout: CacheLayout, reader: PackageStore? = nil, world: World = .live, launchesBeforeRevert: Int = 0) {
        self.layout = layout
        self.reader = reader
        self.world = world
        self.launchesBeforeRevert = launchesBeforeRevert
    }

    /// The reader this root tells of its switches, if any.
    package var store: PackageStore? { reader }

    /// The active set and the one before it, as on disk now.
    package func activeRecord() throws -> ActiveRecord { try ActiveRecord.load(layout) }

    /// Takes the root lock for an operation of this root. A new locked operation: held content is hashed
    /// again before it is reused (`ContentLedger.lockTaken`).
    private func takeLock(wait: Bool, waiting: (() -> Void)? = nil) throws -> RootLock {
        let lock = try RootLock(layout: layout, wait: wait, waiting: waiting)
        ContentLedger.of(layout).lockTaken()
        return lock
    }

    /// Notes a failed sync in the root's monitoring state (`status --json`: attempt time, failure count,
    /// the error): the one way a failure is recorded, whether the sync failed, was interrupted, or could not
    /// start (a key file that does not parse). An interruption (`counted` false) is noted as the last
    /// attempt and error but not counted in `consecutiveFailures`: it needs no action (a shutdown,
    /// `systemctl stop`), and the next sync resumes.
    package func recordFailure(exitStatus: Int32, message: String, counted: Bool = true) {
        SyncState.recordFailure(
            SyncFailure(time: world.clock.now(), exitStatus: exitStatus, message: message), counted: counted, in: layout)
    }

    package func recordFailure(_ error: any Error) {
        let status = (error as? OfflinePkgError)?.category.exitStatus ?? OfflinePkgError.Category.failure.exitStatus
        recordFailure(exitStatus: status, message: "\(error)")
    }

    /// The activation notice: called right after this process switched the active set.
    package func switched() { reader?.activated() }

    /// Why a release was rolled back: by hand (`rollback`), or for want of a launch confirmation.
    package enum RollbackCause: Sendable {
        case byHand
        case launchNotConfirmed
    }

    /// Switches back to the previous active set (`rollback`, man/offlinepkg.1). The release rolled back
    /// from is not installed again until the manifest offers another version of its packages. A
    /// rollback never goes back to the release a rollback just left: right after one, there is nothing
    /// to roll back to (only the active set and the one before it are kept), and it fails, changing
    /// nothing.
    @discardableResult
    package func rollback(wait: Bool = false, cause: RollbackCause = .byHand, waiting: (() -> Void)? = nil) throws -> ActiveSet {
        let lock = try takeLock(wait: wait, waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        let record = try ActiveRecord.load(layout)
        guard let previous = record.previous, record.current.generation > 0 else {
            throw OfflinePkgError.unavailable("no previous active set to roll back to in \(layout.root)")
        }
        if record.previousWasRolledBack == true {
            let left = previous.packages.filter { record.current.package($0.id)?.version != $0.version }
            throw OfflinePkgError.unavailable(
                "set \(record.current.generation) is already a rollback from set \(previous.generation)"
                    + (left.isEmpty ? "" : " (" + left.map { "\($0.id) \($0.version)" }.joined(separator: ", ") + ")")
                    + "; a rollback never goes back to the release it left, and no older set is kept in \(layout.root)"
                    + ": the next sync moves on when the manifest offers another version")
        }
        var state = try SyncState.load(layout)
        var reverted = state.reverted ?? [:]
        var rolledBack = state.rolledBack ?? [:]
        for package in record.current.packages where previous.package(package.id)?.version != package.version {
            reverted[package.id] = package.version
            switch cause {
            case .byHand: rolledBack[package.id] = package.version
            case .launchNotConfirmed: rolledBack[package.id] = nil
            }
        }
        var restored = previous
        restored.generation = record.current.generation + 1
        restored.activatedAt = world.clock.now()
        // The hold-back lands before the switch: if the switch then fails, a sync merely keeps what is
        // active; the other order could switch back and lose the hold-back, reinstalling the bad release.
        state.reverted = reverted
        state.rolledBack = rolledBack.isEmpty ? nil : rolledBack
        try state.save(layout)
        try ActiveRecord(current: restored, previous: record.current, previousWasRolledBack: true).save(layout)
        History.record(restored, in: layout)
        switched()
        ReportQueue(layout: layout).record { device, state in
            ReportEvent(
                device: device, time: world.clock.now(), event: .reverted, sequence: restored.sequence,
                packages: ReportEvent.packages(from: record.current, to: restored), shellVersion: state.shellVersion)
        }
        return restored
    }

    /// Removes trees no set needs (see `GarbageCollector`); returns the trees removed.
    @discardableResult
    package func collectGarbage(wait: Bool = false, waiting: (() -> Void)? = nil) throws -> [String] {
        let lock = try takeLock(wait: wait, waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        try Staging(layout: layout).clear()
        StrayTemporaries.remove(in: layout)
        ContentStore(layout: layout).catchUp()
        let runtimeGarbage = RuntimeStore.garbage(in: layout, now: world.clock.now())
        for path in runtimeGarbage { FileSystem.discardFile(path) }
        return try GarbageCollector(layout: layout).collect(walk: true).removedTrees + runtimeGarbage
    }
}
