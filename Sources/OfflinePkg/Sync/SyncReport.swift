/// What a sync did.
public struct SyncReport: Sendable, Codable, Equatable {
    public enum Outcome: String, Sendable, Codable {
        /// A new active set was switched in.
        case activated
        /// The manifest asked for nothing new.
        case upToDate
        /// The server answered 304 and nothing local changed.
        case notModified
        /// The last check is younger than `minInterval`; no request was made.
        case skipped
    }

    /// A package whose version changed (or appeared, or went away) in the switch.
    public typealias Change = PackageChange

    /// A package version the manifest offers that this device did not take, and why.
    public typealias HeldBack = HeldBackRelease

    public var outcome: Outcome
    public var generation: Int
    public var sequence: Int
    public var changes: [Change]
    public var heldBack: [HeldBack]
    /// Bytes that crossed the network for archives and deltas (manifest excluded).
    public var bytesFetched: Int64
    public var requests: Int
    /// A change of this sync is a release its publisher marked mandatory: a shell applies it at once.
    public var mandatory: Bool = false
}

/// What a sync would do (`sync --dry-run`, `Updater.plan()`): the manifest was fetched and verified,
/// nothing was downloaded and nothing on disk changed.
public struct SyncPlan: Sendable, Codable, Equatable {
    /// One package the switch would change, with what it would cost to fetch.
    public struct Step: Sendable, Codable, Equatable {
        public var id: String
        public var from: String?
        /// Nil: the package would stop being served.
        public var to: String?
        /// How the new tree would arrive, or nil for a removal.
        public var via: InstallRoute?
        /// Bytes the download would take (the archive's or delta's size, before any resume; for "files",
        /// the file index and the ranges of the content not held).
        public var bytes: Int64
        public var notes: String?
        public var mandatory: Bool?
    }

    public var manifestURL: String
    public var sequence: Int
    /// Whether a sync would switch the active set.
    public var wouldActivate: Bool
    public var steps: [Step]
    public var heldBack: [SyncReport.HeldBack]
    public var bytesToFetch: Int64
    public var mandatory: Bool
}
