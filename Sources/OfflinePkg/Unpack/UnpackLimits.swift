/// Caps on what one archive may unpack to (docs/protocol.md#archives); all are settable per store.
public struct UnpackLimits: Sendable, Equatable {
    public var maxEntries: Int
    public var maxBytes: Int64
    /// Seconds one unpack may take, from opening the archive to its last byte: a reader that loops on a
    /// crafted archive is ended here, and the root lock with it.
    public var deadline: Double
    /// How far the process's resident memory may grow during one unpack (an unpack streams: a few MiB
    /// is normal; growth means a header or reader is being inflated by the archive).
    public var maxMemoryGrowth: Int64

    public init(
        maxEntries: Int = 1_000_000, maxBytes: Int64 = 4 << 30, deadline: Double = 600, maxMemoryGrowth: Int64 = 512 << 20
    ) {
        self.maxEntries = maxEntries
        self.maxBytes = maxBytes
        self.deadline = deadline
        self.maxMemoryGrowth = maxMemoryGrowth
    }
}

/// One regular file of an unpacked tree.
package struct TreeFile: Sendable, Equatable {
    package var sha256: String
    package var size: Int64

    package init(sha256: String, size: Int64) {
        self.sha256 = sha256
        self.size = size
    }
}

/// What an unpack produced: every regular file with its hash, every folder it created (relative
/// paths, so the tree can be made read-only without walking it again), and for a delta its control member.
package struct UnpackedTree: Sendable {
    package var files: [PackagePath: TreeFile]
    package var folders: Set<PackagePath>
    package var deltaControl: [UInt8]?
    /// The lane threads that wrote it (0: the reading thread did; `LaneBudget`).
    package var writerThreads = 0
}
