import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What `status --json` reports of the runtime cache (docs/protocol.md#the-runtime-cache): what is stored and how requests went.
public struct RuntimeCacheStatus: Sendable, Codable, Equatable {
    /// Stored answers and the disk bytes they take (bodies plus heads).
    public var entries: Int
    public var bytes: Int64
    public var counters: RuntimeCounters
}

/// Requests the runtime cache answered, by how, since the cache root was made.
public struct RuntimeCounters: Sendable, Codable, Equatable {
    /// Answered from the store without waiting on the network (fresh, stale, offline, or as a fallback).
    public var hits = 0
    /// Answered by the network: nothing usable was stored, or the strategy goes to the network first.
    public var misses = 0
    /// Conditional refreshes that came back 304 and renewed a stored answer.
    public var revalidations = 0
    /// Hits served while older than their rule's `maxAge` (stale-while-revalidate, offline, fallbacks).
    public var stale = 0
    /// Upstream requests that failed (connection, timeout, 5xx).
    public var networkErrors = 0
    /// Requests other than GET and HEAD passed to the network.
    public var passedThrough = 0
    /// 504s: nothing stored and the network not to be used or not reachable.
    public var gatewayTimeouts = 0
    /// Connections to `serve` from another user's socket, closed unanswered (docs/protocol.md#neighbours-on-the-device).
    public var refusedConnections = 0
    /// 502s: an upstream that turned out to be a loopback, link-local or private address (docs/protocol.md#neighbours-on-the-device).
    public var refusedUpstreams = 0
    /// 503s: every upstream transfer slot taken and the queue for them full or too slow (docs/protocol.md#neighbours-on-the-device).
    public var busy = 0

    public init() {}

    private enum CodingKeys: String, CodingKey {
        case hits, misses, revalidations, stale, networkErrors, passedThrough, gatewayTimeouts, refusedConnections
        case refusedUpstreams, busy
    }

    /// A counter the file does not hold yet (one written before it was counted) starts at 0.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func count(_ key: CodingKeys) throws -> Int { try container.decodeIfPresent(Int.self, forKey: key) ?? 0 }
        hits = try count(.hits)
        misses = try count(.misses)
        revalidations = try count(.revalidations)
        stale = try count(.stale)
        networkErrors = try count(.networkErrors)
        passedThrough = try count(.passedThrough)
        gatewayTimeouts = try count(.gatewayTimeouts)
        refusedConnections = try count(.refusedConnections)
        refusedUpstreams = try count(.refusedUpstreams)
        busy = try count(.busy)
    }

    mutating func add(_ other: RuntimeCounters) {
        hits += other.hits
        misses += other.misses
        revalidations += other.revalidations
        stale += other.stale
        networkErrors += other.networkErrors
        passedThrough += other.passedThrough
        gatewayTimeouts += other.gatewayTimeouts
        refusedConnections += other.refusedConnections
        refusedUpstreams += other.refusedUpstreams
        busy += other.busy
    }
}

/// Counts in memory, added to `runtime/stats.json` at most twice a second by a thread of its own, so
/// a hit costs one uncontended lock and `status` in another process sees the counts within a second.
final class RuntimeStatistics: Sendable {
    private let path: String
    private let pending = Mutex(RuntimeCounters())
    private let stopped = Atomic<Bool>(false)

    init(path: String) {
        self.path = path
        OSThread.start(name: "offlinepkg.stats") { [self] in
            while !stopped.load(ordering: .acquiring) {
                OSThread.sleep(seconds: 0.5)
                flush()
            }
        }
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
        flush()
    }

    func count(_ change: (inout RuntimeCounters) -> Void) { pending.withLock { change(&$0) } }

    /// Adds what was counted since the last flush to the file (read again first: another process
    /// serving the same root adds its own).
    func flush() {
        let delta = pending.withLock { counts -> RuntimeCounters in
            defer { counts = RuntimeCounters() }
            return counts
        }
        guard delta != RuntimeCounters() else { return }
        var total = Self.load(path)
        total.add(delta)
        guard let bytes = try? JSONEncoder().encode(total) else { return }
        // Counters are diagnostics: a rename without fsync is enough, and keeps the flush cheap.
        try? FileSystem.writeAtomically(Array(bytes), to: path, durable: false)
    }

    static func load(_ path: String) -> RuntimeCounters {
        guard let bytes = try? FileSystem.read(path, limit: 1 << 16),
            let counts = try? JSONDecoder().decode(RuntimeCounters.self, from: Data(bytes))
        else { return RuntimeCounters() }
        return counts
    }
}
