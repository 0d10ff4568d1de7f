/// A package whose version changed (or appeared, or went away) in a switch (`SyncReport.Change`), kept
/// in the root's state as the last activating sync's changes (`status`'s `lastSync`).
public struct PackageChange: Sendable, Codable, Equatable {
    public var id: String
    public var from: String?
    public var to: String?
    /// How the new tree arrived, or nil when the package was removed.
    public var via: InstallRoute?
    /// The new release's notes and whether its publisher marked it mandatory (docs/protocol.md#package-entries).
    public var notes: String?
    public var mandatory: Bool?
    /// What this package cost on the network in this sync: the file index and ranges, the delta or
    /// the archive, and what a failed way spent before its fallback; nil for a removal.
    public var bytes: Int64? = nil
}
