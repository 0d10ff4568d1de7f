import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The runtime cache (docs/protocol.md#the-runtime-cache): answers URLs that no package holds — API answers, other hosts'
/// images — per the rule of the manifest's `runtime` object their URL matches, from the store under
/// `runtime/` in the cache root or from the network, as the original iOS caches did.
///
/// The rules come from the last accepted manifest of the root (so they change with a sync, and are
/// as trusted as its signature); the store survives syncs and rollbacks. One refresh runs at a time
/// per URL and variant: concurrent requests for a stale URL share it.
public final class RuntimeCache: Sendable {
    public struct Options: Sendable {
        /// Never touch the network: stored answers (of any age), else 504.
        public var offline: Bool
        /// `HOST:PORT:ADDRESS` pins for upstream hosts, as curl's `--resolve`.
        public var resolve: [String]
        /// A PEM file of certificate authorities for upstream https instead of the system's.
        public var caBundle: String?
        /// Background refreshes (stale-while-revalidate) running at once at most; more stale hits
        /// in the meantime are served without starting another.
        public var backgroundRefreshes: Int
        public var connectTimeout: TimeInterval
        /// An upstream transfer with no byte for this long is aborted.
        public var stallTimeout: TimeInterval
        /// Upstream transfers running at once at most (docs/protocol.md#neighbours-on-the-device); more wait their turn, or get a 503.
        public var upstreamTransfers: Int
        /// Reach upstream hosts that resolve to a loopback, link-local or private address (docs/protocol.md#neighbours-on-the-device),
        /// which are refused otherwise (a 502) unless pinned with `resolve`.
        public var allowPrivateUpstream: Bool

        public init(
            offline: Bool = false, resolve: [String] = [], caBundle: String? = nil, backgroundRefreshes: Int = 4,
            connectTimeout: TimeInterval = 10, stallTimeout: TimeInterval = 30, upstreamTransfers: Int = 16,
            allowPrivateUpstream: Bool = false
        ) {
            self.offline = offline
            self.resolve = resolve
            self.caBundle = caBundle
            self.backgroundRefreshes = backgroundRefreshes
            self.connectTimeout = connectTimeout
            self.stallTimeout = stallTimeout
            self.upstreamTransfers = upstreamTransfers
            self.allowPrivateUpstream = allowPrivateUpstream
        }
    }

    public let options: Options
    package let layout: CacheLayout
    package let store: RuntimeStore
    /// The clock entries are dated with and the network they come from.
    let world: World
    var transport: any Transport { world.transport }
    let statistics: RuntimeStatistics
    private let rules: Mutex<RulesState>
    let inFlight = Mutex<[String: Task<FetchOutcome, Error>]>([:])
    let backgroundRunning = Atomic<Int>(0)
    let slots: UpstreamSlots

    private struct RulesState {
        init(identity: [Int], configuration: RuntimeConfiguration?, checked: ContinuousClock.Instant) {
            self.identity = identity
            self.configuration = configuration
            self.checked = checked
            prefixes = Self.prefixes(configuration)
        }

        static func prefixes(_ configuration: RuntimeConfiguration?) -> [(key: [UInt8], rule: RuntimeRule, scheme: String)] {
            (configuration?.rules ?? []).compactMap { rule in
                LookupURL.key(rule.prefix).map { (Array($0.utf8), rule, RuntimeCache.scheme(of: rule)) }
            }
            .sorted { $0.key.count > $1.key.count }
        }

        var identity: [Int] = [-1]
        var configuration: RuntimeConfiguration? {
            didSet { prefixes = Self.prefixes(configuration) }
        }
        /// Each rule with its prefix's lookup key and its scheme, longest first: the first that matches wins.
        var prefixes: [(key: [UInt8], rule: RuntimeRule, scheme: String)] = []
        var checked = ContinuousClock.now - .seconds(10)
    }

    /// Opens the runtime cache of the cache root at `root`; a root another user owns is refused, as
    /// `PackageStore` refuses it (`RootModes.checkOwner`).
    public convenience init(root: URL, options: Options = .init()) throws {
        if let resolved = try? FileSystem.realPath(root.path) { try RootModes.checkOwner(resolved) }
        try self.init(layout: CacheLayout(root: root.path), options: options)
    }

    package init(layout: CacheLayout, options: Options = .init(), world: World = .live) throws {
        self.layout = layout
        self.options = options
        self.world = world
        slots = UpstreamSlots(limit: options.upstreamTransfers)
        let configuration = Self.loadConfiguration(layout)
        store = try RuntimeStore(layout: layout, limits: configuration?.limits ?? RuntimeLimits())
        statistics = RuntimeStatistics(path: layout.runtimeStats)
        rules = Mutex(RulesState(identity: Self.identity(layout.storedManifest), configuration: configuration, checked: .now))
    }

    deinit { statistics.stop() }

    /// Writes the counters counted so far to `runtime/stats.json` now (before a process exits).
    package func flushStatistics() { statistics.flush() }

    /// Counts a connection of another user that `serve` closed unanswered (docs/protocol.md#neighbours-on-the-device): `status` reports
    /// it with the runtime cache's counters.
    package func countRefusedConnection() { statistics.count { $0.refusedConnections += 1 } }

    /// The `runtime` object of the last accepted manifest, re-read when that file changes (checked at
    /// most once a second); nil when there is none.
    package var configuration: RuntimeConfiguration? {
        let now = ContinuousClock.now
        let (stale, known) = rules.withLock { state in (now - state.checked > .seconds(1), state.identity) }
        if stale {
            let identity = Self.identity(layout.storedManifest)
            if identity != known {
                let configuration = Self.loadConfiguration(layout)
                store.setLimits(configuration?.limits ?? RuntimeLimits())
                rules.withLock {
                    $0.identity = identity
                    $0.configuration = configuration
                }
            }
            rules.withLock { $0.checked = now }
        }
        return rules.withLock { $0.configuration }
    }

    /// The rule `url` falls under, or nil (then nothing here answers it). Same answer as
    /// `configuration?.rule(for:)`, with the prefixes' keys computed once per manifest.
    package func rule(for url: String) -> RuntimeRule? { route(for: url)?.rule }

    /// The rule `url` falls under and the URL fetched upstream for it (`upstreamURL`), from one
    /// normalisation of `url`; nil when no rule covers it.
    package func route(for url: String) -> RuntimeRoute? {
        _ = configuration
        let prefixes = rules.withLock { $0.prefixes }
        guard !prefixes.isEmpty else { return nil }
        return LookupURL.withKey(url) { key -> RuntimeRoute? in
            let matched = prefixes.first { prefix in
                prefix.key.count <= key.bytes.count
                    && prefix.key.withUnsafeBytes { memcmp($0.baseAddress!, key.bytes.baseAddress!, $0.count) == 0 }
            }
            guard let matched else { return nil }
            return RuntimeRoute(rule: matched.rule, upstream: Self.upstreamURL(key: key, url: url, scheme: matched.scheme))
        }
    }

    /// Counters and what is stored (`status --json`).
    public var status: RuntimeCacheStatus {
        statistics.flush()
        let usage = store.usage
        return RuntimeCacheStatus(
            entries: usage.entries, bytes: usage.bytes, counters: RuntimeStatistics.load(layout.runtimeStats))
    }

    private static func loadConfiguration(_ layout: CacheLayout) -> RuntimeConfiguration? {
        // The stored manifest was verified when it was accepted; a file that no longer parses has no rules.
        guard let bytes = try? FileSystem.read(layout.storedManifest, limit: Manifest.maximumSize) else { return nil }
        return (try? Manifest(parsing: bytes, source: layout.storedManifest))?.runtime
    }

    private static func identity(_ path: String) -> [Int] {
        var info = stat()
        guard lstat(path, &info) == 0 else { return [] }
        return [Int(info.st_ino), Int(info.st_size), Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec)]
    }
}

/// Where a request covered by a runtime rule goes: the rule, and the URL fetched upstream.
package struct RuntimeRoute: Sendable {
    package let rule: RuntimeRule
    package let upstream: String
}
