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

        public init(
            offline: Bool = false, resolve: [String] = [], caBundle: String? = nil, backgroundRefreshes: Int = 4,
            connectTimeout: TimeInterval = 10, stallTimeout: TimeInterval = 30
        ) {
            self.offline = offline
            self.resolve = resolve
            self.caBundle = caBundle
            self.backgroundRefreshes = backgroundRefreshes
            self.connectTimeout = connectTimeout
            self.stallTimeout = stallTimeout
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

    private struct RulesState {
        init(identity: [Int], configuration: RuntimeConfiguration?, checked: ContinuousClock.Instant) {
            self.identity = identity
            self.configuration = configuration
            self.checked = checked
            prefixes = Self.prefixes(configuration)
        }

        static func prefixes(_ configuration: RuntimeConfiguration?) -> [(key: String, rule: RuntimeRule)] {
            (configuration?.rules ?? []).compactMap { rule in LookupURL.key(rule.prefix).map { ($0, rule) } }
                .sorted { $0.key.utf8.count > $1.key.utf8.count }
        }

        var identity: [Int] = [-1]
        var configuration: RuntimeConfiguration? {
            didSet { prefixes = Self.prefixes(configuration) }
        }
        /// Each rule with its prefix's lookup key, longest first: the first that matches wins.
        var prefixes: [(key: String, rule: RuntimeRule)] = []
        var checked = ContinuousClock.now - .seconds(10)
    }

    /// Opens the runtime cache of the cache root at `root`.
    public convenience init(root: URL, options: Options = .init()) throws {
        try self.init(layout: CacheLayout(root: root.path), options: options)
    }

    package init(layout: CacheLayout, options: Options = .init(), world: World = .live) throws {
        self.layout = layout
        self.options = options
        self.world = world
        let configuration = Self.loadConfiguration(layout)
        store = try RuntimeStore(layout: layout, limits: configuration?.limits ?? RuntimeLimits())
        statistics = RuntimeStatistics(path: layout.runtimeStats)
        rules = Mutex(RulesState(identity: Self.identity(layout.storedManifest), configuration: configuration, checked: .now))
    }

    deinit { statistics.stop() }

    /// Writes the counters counted so far to `runtime/stats.json` now (before a process exits).
    package func flushStatistics() { statistics.flush() }

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
    package func rule(for url: String) -> RuntimeRule? {
        _ = configuration
        let prefixes = rules.withLock { $0.prefixes }
        guard !prefixes.isEmpty, let key = LookupURL.key(url) else { return nil }
        return prefixes.first { key.utf8.starts(with: $0.key.utf8) }?.rule
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

    /// The URL fetched upstream: the request's, with the rule's scheme (a shell asks the loopback server
    /// over http for an https API) and without a fragment.
    static func upstreamURL(_ url: String, rule: RuntimeRule) -> String {
        var url = url
        if let hash = url.firstIndex(of: "#") { url = String(url[..<hash]) }
        guard let separator = url.firstRange(of: "://"), let ruleSeparator = rule.prefix.firstRange(of: "://") else { return url }
        return rule.prefix[..<ruleSeparator.lowerBound].lowercased() + url[separator.lowerBound...]
    }
}
