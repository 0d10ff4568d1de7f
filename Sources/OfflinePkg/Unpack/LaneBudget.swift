/// The unpacks of one process share its cores and its memory. An unpack that starts alone gets its
/// writer lanes; one that starts while another runs writes on its own reading thread: four packages
/// unpacking side by side (`--jobs`) with lanes each would run twice as many writing threads as readers
/// on the same cores, slower than four plain unpacks. And at most `unpacksAtOnce` read at once: each
/// holds its decompressor's window (a tar.zst's up to its largest member, 2 MiB at the publisher's
/// level) and its lanes' queues, while more readers than cores unpack no faster; a download finished
/// meanwhile waits on disk for its turn, the other downloads go on.
package final class LaneBudget: @unchecked Sendable {
    // `running` is guarded by `condition`.
    private let condition = ThreadCondition()
    private var running = 0
    /// How many unpacks may read at once; the others wait in `begin`.
    package let unpacksAtOnce: Int

    package init(unpacksAtOnce: Int = .max) { self.unpacksAtOnce = max(1, unpacksAtOnce) }

    /// The budget of every unpack of this process.
    package static let shared = LaneBudget(unpacksAtOnce: defaultUnpacksAtOnce)

    /// One: two unpacks side by side decompress no faster on a device's few cores than one with its
    /// lanes, and each would hold a window and queues of its own (docs/design.md, "Memory").
    static let defaultUnpacksAtOnce = 1

    /// Waits until fewer than `unpacksAtOnce` unpacks run, then returns the lanes for this one: `wanted`
    /// when no other is running, else 0. Every call is paired with an `end`. Called on the unpack's own
    /// thread (`runBlocking`), never on a thread of Swift's cooperative pool.
    package func begin(wanted: Int) -> Int {
        condition.lock()
        defer { condition.unlock() }
        while running >= unpacksAtOnce { condition.wait() }
        defer { running += 1 }
        return running == 0 ? wanted : 0
    }

    package func end() {
        condition.lock()
        running -= 1
        condition.broadcast()
        condition.unlock()
    }
}
