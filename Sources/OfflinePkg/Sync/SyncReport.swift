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
    public struct Change: Sendable, Codable, Equatable {
        public var id: String
        public var from: String?
        public var to: String?
        /// How the new tree arrived: "archive", "delta", "cache" (already on disk) or nil when removed.
        public var via: String?
    }

    /// A package version the manifest offers that this device did not take, and why.
    public struct HeldBack: Sendable, Codable, Equatable {
        public var id: String
        public var version: String
        public var reason: String
    }

    public var outcome: Outcome
    public var generation: Int
    public var sequence: Int
    public var changes: [Change]
    public var heldBack: [HeldBack]
    /// Bytes that crossed the network for archives and deltas (manifest excluded).
    public var bytesFetched: Int64
    public var requests: Int
}
