import FoundationEssentials

/// Launch confirmation (CodePush's notifyAppReady): after a switch, the host confirms that the new set
/// launched. A set still unconfirmed after `launchesBeforeRevert` launches is reverted to the set before
/// it, and its release is held back until the manifest offers another version.
///
/// `launch.json` counts launches of the active generation; it is written atomically like the rest.
package struct LaunchRecord: Codable, Sendable, Equatable {
    package var generation: Int
    package var launches: Int
    package var confirmed: Bool

    /// Nil when there is none yet, or it cannot be read (then counting starts again).
    package static func load(_ layout: CacheLayout) -> LaunchRecord? {
        (try? JSONCoding.load(LaunchRecord.self, from: layout.launches)) ?? nil
    }

    package func save(_ layout: CacheLayout) throws {
        try FileSystem.writeAtomically(JSONCoding.encode(self), to: layout.launches)
    }
}
