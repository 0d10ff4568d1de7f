import Dispatch
import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A cache root opened for reading: answers URL lookups from the active set, instantly and in process,
/// and reports its status and every switch (`activations`). It changes nothing in the root but its own
/// reader lease; what writes a root is `CacheRoot` (syncs through `Updater`, rollback, launch records).
///
/// `resolve` reads an immutable snapshot swapped under a `Mutex`; it never touches the network and
/// never waits on a sync. A switch made by another process (a cron `sync`) is picked up within
/// `Options.watchInterval`; one made by this process's `Updater` at once.
public final class PackageStore: Sendable {
    public struct Options: Sendable {
        /// How often to look for a switch made by another process.
        public var watchInterval: TimeInterval
        /// When a newly activated set takes effect for this reader (launch policy: README.md, "In a host app").
        public var activation: Activation
        /// Bytes of small files `data(for:)` keeps in memory (0: none). Files larger than an eighth of
        /// it are read each time.
        public var memoryCacheCapacity: Int
        /// Custom URL schemes resolved as another scheme (README.md, "Connecting a webview"): `["app": "https"]` makes
        /// `app://m.example.com/home/x.js` resolve as `https://m.example.com/home/x.js`, for a
        /// `WKURLSchemeHandler` or a WebKitGTK URI-scheme handler. Keys compare case-insensitively;
        /// each value must be `http` or `https`.
        public var customSchemes: [String: String]
        /// How `cachedResponse(for:)` reaches the network for URLs outside packages (docs/protocol.md#the-runtime-cache);
        /// `RuntimeCache.Options(offline: true)` never does.
        public var runtime: RuntimeCache.Options = .init()

        public init(
            watchInterval: TimeInterval = 0.5, activation: Activation = .immediately, memoryCacheCapacity: Int = 4 << 20,
            customSchemes: [String: String] = [:]
        ) {
            self.watchInterval = watchInterval
            self.activation = activation
            self.memoryCacheCapacity = memoryCacheCapacity
            self.customSchemes = customSchemes
        }
    }

    /// When a reader switches to a newly activated set.
    public enum Activation: Sendable {
        /// Resolves that start after the switch see the new set.
        case immediately
        /// The set active when the store opened stays in use until the process opens the store again.
        case nextLaunch
    }

    package let layout: CacheLayout
    public let options: Options
    private let snapshot: Mutex<LookupIndex>
    /// Nil when the root is not writable for this process (a read-only user of a shared root): lookups
    /// still work, but garbage collection cannot see this reader.
    private let lease: ReaderLease?
    private let watcher: ActiveSetWatcher
    package let cache: ResourceCache
    private let schemes: CustomSchemes
    private let subscribers = Mutex<ActivationSubscribers>(ActivationSubscribers())
    /// Told, on the thread that made the switch, of the trees the reader answers from after it
    /// (`whenSwitched`); each returns whether it still observes.
    private let switchObservers = Mutex<[SwitchObserver]>([])

    private final class SwitchObserver: Sendable {
        let call: @Sendable ([String]) -> Bool
        init(_ call: @escaping @Sendable ([String]) -> Bool) { self.call = call }
    }
    /// Opened at the first `cachedResponse(for:)`.
    let runtimeCacheSlot = Mutex<RuntimeCache?>(nil)

    /// Opens (and creates, if need be) the cache root at `root`.
    public convenience init(root: URL, options: Options = .init()) throws {
        try self.init(layout: CacheLayout(root: root.path), options: options)
    }

    package init(layout: CacheLayout, options: Options = .init()) throws {
        if let resolved = try? FileSystem.realPath(layout.root) { try RootModes.checkOwner(resolved) }
        do {
            try layout.prepare()
        } catch  where FileSystem.isDirectory(layout.root) {
            // A root this process may read but not write (a cron sync as root, a shell as a user):
            // answer from what is there.
        }
        // libarchive's secure-symlink check walks the whole target path: resolve the root's own links.
        let layout = CacheLayout(root: try FileSystem.realPath(layout.root))
        self.layout = layout
        self.options = options
        schemes = try CustomSchemes(options.customSchemes)
        let index = try LookupIndex(set: ActiveRecord.load(layout).current, layout: layout)
        snapshot = Mutex(index)
        lease = try? ReaderLease(layout: layout)
        lease?.hold(index.trees)
        watcher = ActiveSetWatcher(path: layout.activeSet)
        cache = ResourceCache(capacity: options.memoryCacheCapacity)
        if options.activation == .immediately && options.watchInterval > 0 {
            watcher.start(interval: options.watchInterval) { [weak self] in self?.reloadIgnoringErrors() }
        }
    }

    deinit {
        watcher.stop()
        for continuation in subscribers.withLock({ $0.takeAll() }) { continuation.finish() }
    }

    /// The file for `url`, or nil. Synchronous, thread-safe, never touches the network.
    public func resolve(_ url: URL) -> Resource? { resolve(url.absoluteString) }

    /// The file for an absolute http(s) URL string, or nil.
    public func resolve(_ url: String) -> Resource? {
        if !schemes.isEmpty, let mapped = schemes.rewrite(url) { return snapshot.withLock { $0.resolve(mapped) } }
        // Resolving under the lock borrows the snapshot instead of retaining and releasing it: two
        // atomic operations fewer per call. The lock is held for one resolve and a switch holds it only
        // to swap one reference, so neither side waits in practice. An atomic pointer without the lock
        // would save the lock too, but then nothing tells when a retired index is no longer read: kept
        // until the store closes, every switch would pin a whole index.
        return snapshot.withLock { $0.resolve(url) }
    }

    /// The file for an absolute http(s) URL given as UTF-8 bytes (the loopback server's request line).
    package func resolve(utf8 url: UnsafeBufferPointer<UInt8>) -> Resource? {
        snapshot.withLock { $0.resolve(utf8: url) }
    }

    /// Where to send a request for `url` when it names a folder of a package without its final slash
    /// (`https://m.example.com/help` where `help/index.html` is installed, or a route without its
    /// slash): `url` with a `/` added to its path, query kept. Static servers answer such a URL with
    /// `301` and that `Location`, so the page's relative links resolve inside the folder; a host's URL
    /// hook should do the same (`cachedResponse(for:)` does). Nil when `resolve(url)` answers, or when
    /// `url` names no such folder. For misses only: not on the hot path.
    public func redirect(for url: String) -> String? {
        guard resolve(url) == nil else { return nil }
        let mapped = schemes.isEmpty ? url : (schemes.rewrite(url) ?? url)
        let index = current
        guard LookupURL.withKey(mapped, { index.isFolderWithoutSlash($0) }) == true else { return nil }
        return Self.addingSlash(to: url)
    }

    public func redirect(for url: URL) -> URL? { redirect(for: url.absoluteString).flatMap(URL.init(string:)) }

    /// `redirect(for:)`'s test for an absolute http(s) URL given as UTF-8 bytes (the loopback server's
    /// request line), once `resolve(utf8:)` missed.
    package func isFolderWithoutSlash(utf8 url: UnsafeBufferPointer<UInt8>) -> Bool {
        let index = current
        return LookupURL.withKey(utf8: url) { index.isFolderWithoutSlash($0) } ?? false
    }

    /// `url` (or a request target) with a `/` added at the end of its path, before any query or fragment.
    package static func addingSlash(to url: String) -> String {
        guard let end = url.firstIndex(where: { $0 == "?" || $0 == "#" }) else { return url + "/" }
        return url[..<end] + "/" + url[end...]
    }

    /// Why `url` has no answer, when a route of the active set covers it: the package that owns the
    /// longest matching route and the path it lacks. Nil when no route covers `url` (serve's "no
    /// package answers" case). For messages only: not on the hot path.
    package func missingFile(for url: String) -> (package: InstalledPackage, path: String)? {
        let mapped = schemes.isEmpty ? url : (schemes.rewrite(url) ?? url)
        return current.owner(of: mapped)
    }

    /// Every switch of the active set this reader makes, whether a sync of this process or another one
    /// (picked up within `Options.watchInterval`) or a rollback: the set it now answers from. A shell
    /// reloads its web view on each. The stream starts with the next switch (not the current set) and
    /// ends when the store is released; each call makes an independent stream. With
    /// `Activation.nextLaunch` the reader never switches, so the stream yields nothing.
    public var activations: AsyncStream<ActiveSet> {
        let (stream, continuation) = AsyncStream<ActiveSet>.makeStream(bufferingPolicy: .bufferingNewest(16))
        let id = subscribers.withLock { $0.add(continuation) }
        continuation.onTermination = { [weak self] _ in self?.subscribers.withLock { $0.remove(id) } }
        return stream
    }

    /// The file for `url` and its bytes, or nil when nothing answers `url`: for a host that feeds a web
    /// view's scheme handler from memory. Small files come from a bounded LRU cache
    /// (`Options.memoryCacheCapacity`); throws when the file cannot be read or no longer has its size.
    public func data(for url: String) throws -> (Resource, Data)? {
        guard let resource = resolve(url) else { return nil }
        return (resource, try cache.data(for: resource))
    }

    public func data(for url: URL) throws -> (Resource, Data)? { try data(for: url.absoluteString) }

    /// The active set this reader is answering from.
    public var activeSet: ActiveSet { current.set }

    package var current: LookupIndex { snapshot.withLock { $0 } }

    /// Re-reads `active.json` now and swaps the snapshot if it changed.
    public func reload() throws {
        let record = try ActiveRecord.load(layout)
        guard record.current.generation != current.set.generation else { return }
        let index = try LookupIndex(set: record.current, layout: layout)
        // Lease the new trees before answering from them; the old ones stay leased until the swap.
        lease?.hold(current.trees + index.trees)
        let swapped = snapshot.withLock { current -> Bool in
            // Two reloads racing (the watcher and this process's updater): only the first one yields.
            guard current.set.generation != index.set.generation else { return false }
            current = index
            return true
        }
        lease?.hold(index.trees)
        guard swapped else { return }
        let ended = switchObservers.withLock { $0 }.filter { !$0.call(index.trees) }
        if !ended.isEmpty { switchObservers.withLock { $0.removeAll { observer in ended.contains { $0 === observer } } } }
        subscribers.withLock { $0.yield(index.set) }
    }

    /// Calls `observer` right after each switch of this reader, with the trees it now answers from:
    /// for what a host keeps per tree (the server's cached responses), to drop an old tree's share.
    /// The observer returns false once what it observes for is gone (a stopped server's caches), and
    /// is dropped then: a host that makes server after server on one store does not collect them.
    package func whenSwitched(_ observer: @escaping @Sendable (_ liveTrees: [String]) -> Bool) {
        switchObservers.withLock { $0.append(SwitchObserver(observer)) }
    }

    /// Observers `whenSwitched` holds now (tests).
    package var switchObserverCount: Int { switchObservers.withLock { $0.count } }

    /// Called by a `CacheRoot` of this process (opened on this store) right after it switched the
    /// active set.
    package func activated() {
        if options.activation == .immediately { reloadIgnoringErrors() }
    }

    private func reloadIgnoringErrors() {
        // A half-visible state cannot occur (the switch is one rename); a failure here means the new
        // set is unreadable, and the reader keeps answering from the set it has.
        try? reload()
    }
}

/// The continuations of `activations`, by subscription number.
private struct ActivationSubscribers: ~Copyable {
    private var next = 0
    private var continuations: [Int: AsyncStream<ActiveSet>.Continuation] = [:]

    mutating func add(_ continuation: AsyncStream<ActiveSet>.Continuation) -> Int {
        next += 1
        continuations[next] = continuation
        return next
    }

    mutating func remove(_ id: Int) { continuations[id] = nil }

    func yield(_ set: ActiveSet) { for continuation in continuations.values { continuation.yield(set) } }

    /// Empties the table; the caller finishes them outside the lock (finishing runs `onTermination`).
    mutating func takeAll() -> [AsyncStream<ActiveSet>.Continuation] {
        defer { continuations = [:] }
        return Array(continuations.values)
    }
}

/// Polls `active.json` for a change of identity (inode, size, mtime). Polling, not inotify, because it
/// is one `stat` per interval and works on every file system.
///
/// On its own thread rather than a Dispatch timer: a host that keeps the global queues busy (or a
/// test running `concurrentPerform`) starved a utility-QoS timer for tens of seconds, and docs/protocol.md#the-loopback-server wants
/// a switch picked up within a second. The thread sleeps between checks and ends within one interval
/// of `stop()`.
private final class ActiveSetWatcher: Sendable {
    private let path: String
    private let stopped = Atomic<Bool>(false)

    init(path: String) { self.path = path }

    func start(interval: TimeInterval, onChange: @escaping @Sendable () -> Void) {
        let path = path
        // The thread holds the watcher (an Atomic cannot be captured alone); stop() ends it.
        OSThread.start(name: "offlinepkg.watch") { [self] in
            var last = Self.identity(path)
            while true {
                OSThread.sleep(seconds: interval)
                if stopped.load(ordering: .acquiring) { return }
                let now = Self.identity(path)
                if now != last {
                    last = now
                    onChange()
                }
            }
        }
    }

    func stop() { stopped.store(true, ordering: .releasing) }

    private static func identity(_ path: String) -> [Int] {
        var info = stat()
        guard lstat(path, &info) == 0 else { return [] }
        return [Int(info.st_ino), Int(info.st_size), Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec)]
    }
}
