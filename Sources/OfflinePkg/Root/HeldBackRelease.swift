/// A package version the manifest offers that this device did not take, and why (`SyncReport.HeldBack`).
/// Kept in the root's state between syncs, so `status` can show it.
public struct HeldBackRelease: Sendable, Codable, Equatable {
    public var id: String
    public var version: String
    public var reason: String
}
