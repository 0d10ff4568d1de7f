import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One stored answer found for a request: its head, where its body is, and the body itself when it is
/// in the memory hot set.
package struct StoredAnswer: Sendable {
    package var head: RuntimeEntryHead
    /// The head file's name (computed: a hit never needs it).
    package var key: String { head.key }
    package var bodyPath: String
    package var data: Data?
}

/// The runtime cache's disk and memory side (docs/protocol.md#the-runtime-cache): entries under `runtime/` in the cache root,
/// an LRU index of them in memory, and a hot set of small bodies.
///
/// A write is crash-safe by its order: the body is received into `runtime/tmp/`, fsynced and renamed
/// to a fresh name in `bodies/`; only then is the head written (temp file, rename) over
/// `entries/<key>.meta`, which is the commit; the body it replaced is unlinked last. A `kill -9` at
/// any point leaves the old head naming the old body, or no head: never a head naming a torn body.
/// Across a power loss too: the body was fsynced before any head named it, and a head that did not
/// reach the disk whole (or names a body that is gone) fails its JSON or size check at the next open
/// and is dropped — "no entry". So the body is the one fsync of a store: the head's and the folders'
/// (each a disk round trip) would buy nothing that check does not.
package final class RuntimeStore: Sendable {
    package let layout: CacheLayout
    private let state: Mutex<State>

    private struct State: ~Copyable {
        var entries = LRUList<String, RuntimeEntryHead>()
        var memory = LRUList<String, Data>()
        var memoryBytes = 0
        var diskBytes: Int64 = 0
        /// The names the last stored answer of each URL varied on: a lookup keys by their values.
        var varyNames: [String: [String]] = [:]
        var limits: RuntimeLimits
        /// Entries and disk bytes of the answers to a request with a query string, per URL without it.
        var queried: [String: (entries: Int, bytes: Int64)] = [:]

        /// Counts `head` in (`sign` 1) or out (-1) of its path's share.
        mutating func account(_ head: RuntimeEntryHead, _ sign: Int) {
            guard let path = RuntimeStore.queriedPath(head.url) else { return }
            var share = queried[path] ?? (0, 0)
            share.entries += sign
            share.bytes += Int64(sign) * RuntimeStore.diskBytes(head)
            queried[path] = share.entries > 0 ? share : nil
        }
    }

    /// The URL without its query, when it has one: the path whose share of the store its answer takes.
    static func queriedPath(_ url: String) -> String? {
        guard let mark = url.utf8.firstIndex(of: UInt8(ascii: "?")) else { return nil }
        return String(url[..<mark])
    }

    /// The share of the store the answers to one path's query strings may take: an eighth of each
    /// limit. A page that asks one path with a new query string each time (a cache-buster) then pushes
    /// out that path's older answers, not every other stored one.
    static func share(_ limits: RuntimeLimits) -> (entries: Int, bytes: Int64) {
        (max(1, limits.entries / 8), Int64(limits.disk / 8))
    }

    /// The disk an entry takes, counted against the disk limit as a file system with 4 KiB blocks
    /// allocates it: the body rounded up to whole blocks, and one block for the head (a head is ~400
    /// bytes; counting apparent sizes would let 20 MiB of 2 KB answers take 40 MiB of disk).
    static func diskBytes(_ head: RuntimeEntryHead) -> Int64 { (head.size + 4095) / 4096 * 4096 + 4096 }

    package init(layout: CacheLayout, limits: RuntimeLimits) throws {
        self.layout = layout
        for folder in [layout.runtime, layout.runtimeEntries, layout.runtimeBodies, layout.runtimeTemporary] {
            try FileSystem.makeDirectories(folder)
        }
        var loaded = [RuntimeEntryHead]()
        for name in FileSystem.contents(of: layout.runtimeEntries) where name.hasSuffix(".meta") {
            let path = layout.runtimeEntries + "/" + name
            guard let head = Self.readHead(path), head.key + ".meta" == name,
                FileSystem.fileSize(layout.runtimeBody(head.body)) == head.size
            else {
                // A head without its body (removed by hand) or unreadable: the entry is gone.
                FileSystem.discardFile(path)
                continue
            }
            guard head.format == RuntimeEntryHead.currentFormat else {
                // Stored before answers were kept per credential: it may be one user's answer, or
                // hold a Set-Cookie, that any request would get. Fetched again when asked for.
                FileSystem.discardFile(path)
                FileSystem.discardFile(layout.runtimeBody(head.body))
                continue
            }
            loaded.append(head)
        }
        var initial = State(limits: limits)
        // The least recently stored first, so the newest are the last evicted.
        for head in loaded.sorted(by: { $0.storedAt < $1.storedAt }) {
            initial.entries.set(head.variant, head)
            initial.diskBytes += Self.diskBytes(head)
            initial.account(head, 1)
            if !head.vary.isEmpty { initial.varyNames[head.url] = head.vary }
        }
        state = Mutex(initial)
        evict()
    }

    package static func readHead(_ path: String) -> RuntimeEntryHead? {
        guard let bytes = try? FileSystem.read(path, limit: 1 << 20) else { return nil }
        return try? JSONDecoder().decode(RuntimeEntryHead.self, from: Data(bytes))
    }

    package var usage: (entries: Int, bytes: Int64, memoryBytes: Int) {
        state.withLock { ($0.entries.count, $0.diskBytes, $0.memoryBytes) }
    }

    package var limits: RuntimeLimits { state.withLock { $0.limits } }

    package func setLimits(_ limits: RuntimeLimits) {
        let changed = state.withLock { state -> Bool in
            defer { state.limits = limits }
            return state.limits != limits
        }
        if changed { evict() }
    }

    /// The largest body stored: a quarter of the disk limit, so one answer never empties the cache.
    package var largestBody: Int64 { Int64(limits.disk / 4) }

    /// The stored answer for `url`, the request's varying fields and its credential's hash (nil: a
    /// request without one), made the most recently used.
    package func lookup(url: String, request: [(name: String, value: String)], credential: String? = nil) -> StoredAnswer? {
        state.withLock { state -> StoredAnswer? in
            let names = state.varyNames[url] ?? []
            let variant = RuntimeEntryHead.variant(
                url: url, vary: names, values: HTTPCachePolicy.varyValues(names, request: request), credential: credential)
            guard let head = state.entries.touch(variant) else { return nil }
            return StoredAnswer(head: head, bodyPath: layout.runtimeBody(head.body), data: state.memory.touch(variant))
        }
    }

    /// Whether some variant of `url` is stored (for `fwd=vary-miss`).
    package func hasVariants(url: String) -> Bool { state.withLock { $0.varyNames[url] != nil } }

    /// A fresh file in `runtime/tmp/` for a body being received; the caller writes, fsyncs and either
    /// commits it or removes it.
    package func temporaryFile() throws -> (path: String, descriptor: FileDescriptor) {
        let path = layout.runtimeTemporaryFile("\(getpid())-\(UInt64.random(in: 0...UInt64.max))")
        return (path, try FileDescriptor.open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600))
    }

    /// Makes the received body at `temporary` (fsynced by the caller) the stored answer `head` (whose
    /// `body` name is chosen here), evicting the least recently used entries over the limits.
    package func commit(temporary: String, head: RuntimeEntryHead, data: Data?) throws -> StoredAnswer {
        var head = head
        head.format = RuntimeEntryHead.currentFormat
        head.headers = RuntimeEntryHead.pairs(HTTPCachePolicy.storable(head.fields))
        let key = head.key
        head.body = key.prefix(32) + "-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        // No fsync of bodies/ here: a head whose body did not survive a power loss is dropped at the
        // next open (its size is checked), which leaves "no entry", as a crash may.
        try FileSystem.rename(temporary, to: layout.runtimeBody(head.body))
        do {
            try writeHead(head, key: key)
        } catch {
            FileSystem.discardFile(layout.runtimeBody(head.body))
            throw error
        }
        let replaced = index(head, data: data)
        if let replaced, replaced.body != head.body { FileSystem.discardFile(layout.runtimeBody(replaced.body)) }
        evict(keeping: head)
        return StoredAnswer(head: head, bodyPath: layout.runtimeBody(head.body), data: data)
    }

    /// A 304 renewed the stored answer: its fields updated by the 304's and its age reset. The body
    /// stays; only the head is rewritten (atomically).
    package func renew(_ stored: StoredAnswer, notModified fields: [(name: String, value: String)], at date: Date) throws
        -> StoredAnswer
    {
        var head = stored.head
        head.format = RuntimeEntryHead.currentFormat
        head.headers = RuntimeEntryHead.pairs(HTTPCachePolicy.merge(stored: head.fields, notModified: fields))
        head.storedAt = date.timeIntervalSince1970
        try writeHead(head, key: stored.key)
        _ = index(head, data: stored.data)
        return StoredAnswer(head: head, bodyPath: stored.bodyPath, data: stored.data)
    }

    /// Temp file and rename, without fsync (see the type's comment for why that is enough).
    private func writeHead(_ head: RuntimeEntryHead, key: String) throws {
        let path = layout.runtimeEntry(key: key)
        let temporary = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let bytes = Array(try JSONEncoder().encode(head))
        let fd = try FileDescriptor.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
        do {
            try fd.closeAfter { try $0.writeAll(bytes, path: temporary) }
            try FileSystem.rename(temporary, to: path)
        } catch {
            unlink(temporary)
            throw error
        }
    }

    /// Puts `head` in the index (and `data` in the hot set); returns the head it replaced.
    private func index(_ head: RuntimeEntryHead, data: Data?) -> RuntimeEntryHead? {
        let key = head.variant
        return state.withLock { state -> RuntimeEntryHead? in
            let replaced = state.entries.set(key, head)
            if let replaced {
                state.diskBytes -= Self.diskBytes(replaced)
                state.account(replaced, -1)
            }
            state.diskBytes += Self.diskBytes(head)
            state.account(head, 1)
            if head.vary.isEmpty { state.varyNames[head.url] = nil } else { state.varyNames[head.url] = head.vary }
            if let data, data.count <= largestMemoryBody(state.limits) {
                if let previous = state.memory.set(key, data) { state.memoryBytes -= previous.count }
                state.memoryBytes += data.count
                while state.memoryBytes > state.limits.memory, let dropped = state.memory.removeOldest() {
                    state.memoryBytes -= dropped.value.count
                }
            } else if let previous = state.memory.remove(key) {
                state.memoryBytes -= previous.count
            }
            return replaced
        }
    }

    private func largestMemoryBody(_ limits: RuntimeLimits) -> Int { min(limits.memory / 8, 1 << 20) }

    /// Evicts least recently used entries until the entry count and disk bytes are within the limits;
    /// first, when `kept` (just stored) answers a query string, its path's older answers past the
    /// path's share (`share`), never `kept` itself.
    private func evict(keeping kept: RuntimeEntryHead? = nil) {
        let evicted = state.withLock { state -> [(String, RuntimeEntryHead)] in
            var evicted = [(String, RuntimeEntryHead)]()
            func drop(_ key: String, _ head: RuntimeEntryHead, _ state: inout State) {
                state.diskBytes -= Self.diskBytes(head)
                state.account(head, -1)
                if let data = state.memory.remove(key) { state.memoryBytes -= data.count }
                if state.varyNames[head.url] != nil && head.vary.isEmpty { state.varyNames[head.url] = nil }
                evicted.append((key, head))
            }
            if let kept, let path = Self.queriedPath(kept.url) {
                let share = Self.share(state.limits)
                let keptKey = kept.variant
                while let used = state.queried[path], used.entries > share.entries || used.bytes > share.bytes,
                    let key = state.entries.oldestKey(where: { $0.variant != keptKey && Self.queriedPath($0.url) == path }),
                    let head = state.entries.remove(key)
                {
                    drop(key, head, &state)
                }
            }
            while state.entries.count > state.limits.entries || state.diskBytes > Int64(state.limits.disk),
                let (key, head) = state.entries.removeOldest().map({ ($0.key, $0.value) })
            {
                drop(key, head, &state)
            }
            return evicted
        }
        for (_, head) in evicted { delete(head) }
    }

    /// The head goes first: from then on nothing names the body.
    private func delete(_ head: RuntimeEntryHead) {
        FileSystem.discardFile(layout.runtimeEntry(key: head.key))
        FileSystem.discardFile(layout.runtimeBody(head.body))
    }

    /// Variants (URL and varying values) from most to least recently used (tests).
    package var keysNewestFirst: [String] { state.withLock { $0.entries.keysNewestFirst } }
}
