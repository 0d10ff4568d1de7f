/// What a sync reports while it runs. The library never prints: the CLI turns these into bars, lines
/// or JSON, and a host app into whatever its UI wants.
public enum SyncEvent: Sendable {
    /// Another process holds the root's lock and this sync waits for it (`waitForLock`).
    case waitingForLock(root: String)
    /// The manifest request is about to go out.
    case checking(manifestURL: String)
    /// The server answered 304 (or the same bytes): the stored manifest stands.
    case manifestUnchanged
    /// No request at all: the last successful check is younger than `minInterval`.
    case skippedRecentCheck
    /// A package will be fetched: `bytes` is what will be downloaded (archive or delta size).
    case downloadStarted(packageID: String, version: String, bytes: Int64, isDelta: Bool)
    /// More bytes of a package arrived (cumulative for that package).
    case downloadProgress(packageID: String, received: Int64, total: Int64)
    /// A delta could not be used (download, hash, unpack or tree check failed); its staging is gone and
    /// the full archive is fetched instead, in the same sync.
    case deltaFailed(packageID: String, version: String, error: OfflinePkgError)
    /// A file-level update (docs/protocol.md#chunked-archives-and-file-indexes) could not be used (no Range support, a bad frame, a wrong hash or
    /// index...); its staging is gone and a delta or the full archive is fetched instead, in the same sync.
    case filesFailed(packageID: String, version: String, error: OfflinePkgError)
    /// A file-index delta (`files/deltas/…`) was there but wrong: it does not start from the installed
    /// tree, does not give the manifest's tree, or names a range that unpacks to something else. The
    /// full file index is used instead, in the same sync.
    case indexDeltaFailed(packageID: String, version: String, error: OfflinePkgError)
    /// A held file (`content/<hex digit>/<sha256>`) that a new tree would have linked did not hash to its
    /// name (`problem` says how, as `verify` does): it is no longer held, and its file is fetched or
    /// written afresh in the same sync, so the damage spreads into no new tree.
    case contentDamaged(path: String, problem: String)
    /// A package's tree was verified and installed (not yet active).
    case installed(packageID: String, version: String)
    /// A package was held back by gating (`minShellVersion`, `maxShellVersion`, `rollout`, a release the
    /// publisher disabled, a reverted one).
    case heldBack(packageID: String, version: String, reason: String)
    /// One package failed; the others go on, and the release will not be activated.
    case packageFailed(packageID: String, error: OfflinePkgError)
    /// The manifest offers a release of a package that this sync will install: its notes, and whether
    /// the publisher marked it mandatory (a shell may then reload at once instead of at the next launch).
    case releaseAvailable(packageID: String, version: String, notes: String?, mandatory: Bool)
    /// The manifest or its signature did not pass, and is fetched once more with `Cache-Control:
    /// no-cache` (a stale CDN edge, docs/protocol.md#checking-the-manifest) before it is refused.
    case retryingUncached(reason: String)
    /// The root now trusts a newer keys version for the manifest URL (docs/protocol.md#keys-documents): the
    /// chain from `from` was verified version by version (nil: the shell shipped a newer document than the
    /// root held), and `removed` names the key ids those versions dropped.
    case keysUpdated(from: Int?, to: Int, removed: [String])
    /// The new active set was switched in.
    case activated(generation: Int)
    /// The sync failed as a whole; the active set is as it was.
    case failed(OfflinePkgError)
    /// The install reports queued in the root were sent to the manifest's reports URL (docs/protocol.md#install-reports), after
    /// the sync.
    case reportsSent(events: Int)
    /// They could not be sent (`reason`); they stay queued for the next sync. The sync's outcome is
    /// whatever it was.
    case reportsNotSent(events: Int, reason: String)
}

/// Receives sync events, on whatever thread the sync runs on.
public typealias SyncEventHandler = @Sendable (SyncEvent) -> Void
