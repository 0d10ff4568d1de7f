import FoundationEssentials

extension Updater {
    /// How an updater syncs. The defaults suit a CLI run; a host app sets `minInterval` and `trustedKeys`.
    public struct Options: Sendable {
        /// Minisign public keys; when non-empty, the manifest must carry a valid signature by one of them.
        /// Fixed keys do not rotate: a fleet that must outlive its keys trusts a keys document instead
        /// (`trustRoot`). Set one of the two.
        public var trustedKeys: [TrustedKey]
        /// A keys document the shell ships (any version, docs/protocol.md#keys-documents): the device
        /// follows the publisher's keys from it (rotation, revocation, thresholds), keeps per manifest URL
        /// the newest version it has verified, and never goes back to an older one.
        public var trustRoot: KeysDocument? = nil
        /// Skip the network when the last successful check is younger than this (seconds); also the
        /// period of background updates.
        public var minInterval: TimeInterval
        /// Random extra delay, up to this many seconds, before a background check, so a fleet does not
        /// hit the server in step.
        public var jitter: TimeInterval
        /// Parallel downloads.
        public var jobs: Int
        /// This shell's version, compared with `minShellVersion` and `maxShellVersion`; nil gates on
        /// neither (a sync that is not told the shell's version takes every package).
        public var shellVersion: String?
        /// Abort a transfer that receives no byte for this long.
        public var stallTimeout: TimeInterval
        /// Abort a transfer whose average rate over `minimumRateWindow` seconds stays under this many
        /// bytes a second (slow-retrieval protection against a trickle); 0 turns the floor off.
        public var minimumRate: Int64 = 1024
        public var minimumRateWindow: TimeInterval = 30
        /// How long the manifest fetch, and then the signature fetch, may take each, retries included.
        public var manifestDeadline: TimeInterval = 60
        /// How long one range request of a file-level update (docs/protocol.md#chunked-archives-and-file-indexes) may take in all, plus a second
        /// per 16 KiB it asks for; past it the request is cut off and the package comes by a delta or
        /// the full archive in the same sync (a server that trickles a multipart answer for ever).
        public var rangeRequestDeadline: TimeInterval = 120
        /// A PEM file of certificate authorities to trust for https instead of the system's.
        public var caBundle: String?
        public var retry: RetryPolicy
        /// Wait for another sync of the same root instead of failing with `.locked`.
        public var waitForLock: Bool
        /// Receives progress; called on the sync's threads.
        public var events: SyncEventHandler?
        /// Activations kept in the root's history (`status`), oldest dropped first.
        public var historyLimit: Int = 100
        /// Limits applied when the sync (or a repair) unpacks archives: entries and bytes (docs/protocol.md#archives).
        public var unpackLimits: UnpackLimits = .init()
        /// Install reports (docs/protocol.md#install-reports): when the signed manifest names a `reports` URL, each activation,
        /// failed sync, revert and launch confirmation is queued in the root and POSTed after a sync.
        /// False turns them off for this root: nothing is recorded, and what was queued is dropped unsent.
        /// (`sync --no-reports`, `OFFLINEPKG_REPORTS=0`.)
        public var reports: Bool = true

        public init(
            trustedKeys: [TrustedKey] = [], minInterval: TimeInterval = 0, jitter: TimeInterval = 0, jobs: Int = 4,
            shellVersion: String? = nil, stallTimeout: TimeInterval = 30, retry: RetryPolicy = .init(),
            waitForLock: Bool = false, caBundle: String? = nil, events: SyncEventHandler? = nil, trustRoot: KeysDocument? = nil
        ) {
            self.trustedKeys = trustedKeys
            self.trustRoot = trustRoot
            self.minInterval = minInterval
            self.jitter = jitter
            self.jobs = jobs
            self.shellVersion = shellVersion
            self.stallTimeout = stallTimeout
            self.caBundle = caBundle
            self.retry = retry
            self.waitForLock = waitForLock
            self.events = events
        }
    }
}

extension Updater.Options {
    /// The slow-retrieval protections every transfer of a sync runs under.
    package var retrievalLimits: RetrievalLimits {
        var limits = RetrievalLimits(stallTimeout: stallTimeout, minimumRate: minimumRate, minimumRateWindow: minimumRateWindow)
        limits.rangeRequestDeadline = rangeRequestDeadline
        return limits
    }
}
