/// Caps on what one archive may unpack to (SPEC §3); both are settable per store.
public struct UnpackLimits: Sendable, Equatable {
    public var maxEntries: Int
    public var maxBytes: Int64

    public init(maxEntries: Int = 1_000_000, maxBytes: Int64 = 4 << 30) {
        self.maxEntries = maxEntries
        self.maxBytes = maxBytes
    }
}

/// One regular file of an unpacked tree.
package struct TreeFile: Sendable, Equatable {
    package var sha256: String
    package var size: Int64
}

/// What an unpack produced: every regular file with its hash, every folder it created (relative
/// paths, so the tree can be made read-only without walking it again), and for a delta its control member.
package struct UnpackedTree: Sendable {
    package var files: [PackagePath: TreeFile]
    package var folders: Set<PackagePath>
    package var deltaControl: [UInt8]?
}
