import Foundation

/// What a cache root remembers between syncs about the manifest: validators for conditional requests,
/// the accepted sequence for rollback protection, and the inputs the stored manifest was judged with.
package struct StoreState: Codable, Sendable, Equatable {
    package var manifestURL: String?
    package var etag: String?
    package var lastModified: String?
    /// When the manifest was last checked successfully (200 or 304).
    package var lastCheck: Date?
    /// The highest sequence accepted, and the sha256 of the manifest bytes accepted with it.
    package var acceptedSequence: Int?
    package var acceptedManifestSHA256: String?
    /// The local inputs the stored manifest was last evaluated with; a 304 re-evaluates when they change.
    package var evaluatedInputs: String?
    /// What the last evaluated manifest offered that this device did not take, and why.
    package var heldBack: [SyncReport.HeldBack]?
    /// Releases rolled back (by hand or for want of a launch confirmation): package id → version.
    /// A sync holds these back until the manifest offers another version of the package.
    package var reverted: [String: String]?

    package init() {}

    package static func load(_ layout: CacheLayout) throws -> StoreState {
        try JSONCoding.load(StoreState.self, from: layout.state) ?? StoreState()
    }

    package func save(_ layout: CacheLayout) throws {
        try FileSystem.writeAtomically(JSONCoding.encode(self), to: layout.state)
    }
}
