internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Finished MHD responses for small files: the body copied into MHD's memory once and the headers
/// added once, then queued on any number of connections (for larger files, `Body.file` or
/// `Body.mapped`: the file held open, or a shared map of it). A cached request costs no `open`,
/// `fstat`, `close`, no `mmap`, no header allocation.
///
/// Keyed by file path: installed trees are immutable, so a path's bytes and validators never change,
/// and a switch to a new set only makes old entries cold. Bounded in bytes like `ResourceCache`
/// (`PackageStore.Options.memoryCacheCapacity`, 4 MiB by default; files up to an eighth of it), the
/// least recently used entry going first. The server keeps one per thread, so threads never wait on
/// each other's lock (`LoopbackServer.handlers`); their copied caches draw on one `SharedBytes`, so a
/// lane alone in use has the whole capacity and all lanes together stay within it.
///
/// Lifetimes are MHD's: a response is reference-counted under its own lock, `MHD_queue_response` takes
/// a reference for the connection and `MHD_destroy_response` drops one. The cache holds one per
/// response and queues under its lock, so an eviction on another thread can never free a response
/// between the lookup and the queueing; a connection still sending an evicted response keeps it alive.
final class ResponseCache: Sendable {
    /// A response MHD shares between threads (see above).
    private struct Shared: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    private struct Entry: Sendable {
        let ok: Shared
        let notModified: Shared
        let size: Int

        /// Drops the cache's reference to both responses.
        func destroy() {
            MHD_destroy_response(ok.pointer)
            MHD_destroy_response(notModified.pointer)
        }
    }

    private struct State: ~Copyable {
        var entries: BoundedLRU<String, Entry>

        deinit {
            var remaining = entries
            while let (_, entry) = remaining.removeOldest() { entry.destroy() }
        }
    }

    /// How an entry holds the file's bytes.
    enum Body: Sendable {
        /// Copied into MHD's memory: small files, bounded in bytes of memory.
        case copied
        /// A read-only map of the file, populated once and shared by every connection sending it:
        /// files past the copied cache, bounded in bytes of address space (the pages are the page
        /// cache's, not anonymous memory). A request then costs no `open`, `mmap`, page faults or
        /// `munmap` (whose TLB shootdown interrupts the other pool threads). For TLS, where MHD reads
        /// a file of `Body.file` in 16 KiB blocks: several times the time of the map for a large file.
        case mapped
        /// The file held open and sent with `sendfile` (MHD owns the descriptor and closes it when
        /// the last reference goes): plain HTTP's large files. The kernel sends the page cache's pages
        /// without copying them, where a send from the map copies every byte: a fraction of the
        /// server's CPU per large request. A file
        /// truncated behind the index while it is sent would spin its lane (MHD 0.9.75 retries a
        /// `sendfile` that returns 0): `ConnectionDeadlines` shuts that connection down. At most `openFiles`
        /// entries; an evicted one stays open until its last connection is done, which is why
        /// `LoopbackServer.DescriptorBudget` counts a connection twice.
        case file
    }

    /// Entries of a `Body.file` cache at most: each holds a descriptor (`LoopbackServer.DescriptorBudget`).
    static let openFileLimit = 16

    let capacity: Int
    let body: Body
    /// Largest file kept (at most `capacity`).
    let largestCachedFile: Int
    private let state: Mutex<State>
    /// The bytes this cache shares with the other lanes' (nil: `capacity` is its own).
    private let shared: SharedBytes?

    /// `largestFile`: by default an eighth of `capacity` for copied bodies, a quarter for the others.
    /// `openFiles`: entries of a `Body.file` cache (at least one).
    convenience init(capacity: Int, body: Body = .copied, largestFile: Int? = nil, openFiles: Int = openFileLimit) {
        self.init(capacity: capacity, body: body, largestFile: largestFile, openFiles: openFiles, shared: nil)
    }

    /// A copied cache holding what it can take of `shared`, up to all of it.
    convenience init(sharing shared: SharedBytes, largestFile: Int? = nil) {
        self.init(capacity: shared.capacity, body: .copied, largestFile: largestFile, openFiles: Self.openFileLimit, shared: shared)
    }

    private init(capacity: Int, body: Body, largestFile: Int?, openFiles: Int, shared: SharedBytes?) {
        self.shared = shared
        self.capacity = max(0, capacity)
        self.body = body
        largestCachedFile = min(self.capacity, largestFile ?? (body == .copied ? self.capacity / 8 : self.capacity / 4))
        let count = body == .file ? max(1, openFiles) : .max
        state = Mutex(State(entries: BoundedLRU(maxCount: count, maxBytes: self.capacity)))
    }

    /// Queues the cached `200` (or, with `notModified`, `304`) response for `resource` on `connection`,
    /// reading the file into the cache first if need be. Nil when the file is too large to cache or
    /// cannot be read as installed: the caller then answers from the file.
    func queue(_ resource: Resource, notModified: Bool, on connection: OpaquePointer) -> MHD_Result? {
        guard resource.size <= largestCachedFile else { return nil }
        if let result = queueCached(resource.path, notModified: notModified, on: connection) { return result }
        guard let entry = makeEntry(resource) else { return nil }
        return state.withLock { state in
            if state.entries.peek(resource.path) != nil {
                // Another thread cached it meanwhile: keep theirs.
                entry.destroy()
            } else if makeRoom(&state, for: entry.size) {
                for (_, evicted) in state.entries.insert(resource.path, entry, bytes: entry.size) { drop(evicted) }
            } else {
                // The other lanes' caches hold every shared byte: this answer goes out uncached (the
                // connection keeps the response alive while it sends it).
                defer { entry.destroy() }
                return MHD_queue_response(
                    connection, UInt32(notModified ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK),
                    notModified ? entry.notModified.pointer : entry.ok.pointer)
            }
            return Self.queue(&state, resource.path, notModified: notModified, on: connection)
        }
    }

    /// Takes `size` bytes from the shared budget, evicting this cache's own oldest entries while it
    /// lacks them; false when this cache is empty and the budget still has no room.
    private func makeRoom(_ state: inout State, for size: Int) -> Bool {
        guard let shared else { return true }
        while !shared.take(size) {
            guard let (_, oldest) = state.entries.removeOldest() else { return false }
            drop(oldest)
        }
        return true
    }

    /// Destroys an entry that left the cache, giving its bytes back to the shared budget.
    private func drop(_ entry: Entry) {
        shared?.give(entry.size)
        entry.destroy()
    }

    private func queueCached(_ path: String, notModified: Bool, on connection: OpaquePointer) -> MHD_Result? {
        state.withLock { Self.queue(&$0, path, notModified: notModified, on: connection) }
    }

    private static func queue(_ state: inout State, _ path: String, notModified: Bool, on connection: OpaquePointer)
        -> MHD_Result?
    {
        guard let entry = state.entries.touch(path) else { return nil }
        return notModified
            ? MHD_queue_response(connection, UInt32(MHD_HTTP_NOT_MODIFIED), entry.notModified.pointer)
            : MHD_queue_response(connection, UInt32(MHD_HTTP_OK), entry.ok.pointer)
    }

    /// Reads the file and builds both responses; nil when the file cannot be read or no longer has the
    /// size it was installed with.
    private func makeEntry(_ resource: Resource) -> Entry? {
        let body: OpaquePointer? =
            switch self.body {
            case .copied: Self.copiedBody(resource)
            case .mapped: Self.mappedBody(resource)
            case .file: Self.fileBody(resource)
            }
        guard let ok = body else { return nil }
        guard let notModified = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT) else {
            MHD_destroy_response(ok)
            return nil
        }
        ResponseHeaders.addContent(ok, resource)
        ResponseHeaders.addValidators(ok, resource)
        ResponseHeaders.addValidators(notModified, resource)
        return Entry(ok: Shared(pointer: ok), notModified: Shared(pointer: notModified), size: Int(resource.size))
    }

    private static func copiedBody(_ resource: Resource) -> OpaquePointer? {
        guard let data = FileManager.default.contents(atPath: resource.path), data.count == resource.size else { return nil }
        return data.withUnsafeBytes { bytes in
            // MUST_COPY: MHD owns its copy and frees it with the last reference to the response.
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
    }

    /// The map is unmapped when MHD frees the response: after eviction, once the last connection
    /// sending it is done. The size check is `MappedFileBody`'s safety condition.
    private static func mappedBody(_ resource: Resource) -> OpaquePointer? {
        guard let descriptor = openAsInstalled(resource) else { return nil }
        defer { close(descriptor) }
        return MappedFileBody.response(descriptor: descriptor, offset: 0, length: resource.size, populate: true)
    }

    /// The file opened, if it still has the size it was installed with; the caller closes it.
    private static func openAsInstalled(_ resource: Resource) -> Int32? {
        let descriptor = open(resource.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int64(status.st_size) == resource.size else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    /// MHD closes the descriptor when it frees the response. The size check matches the other bodies':
    /// a file that no longer reads as installed is answered by the caller's per-request path.
    private static func fileBody(_ resource: Resource) -> OpaquePointer? {
        guard let descriptor = openAsInstalled(resource) else { return nil }
        guard let response = MHD_create_response_from_fd64(UInt64(resource.size), descriptor) else {
            close(descriptor)
            return nil
        }
        return response
    }

    /// Drops the entries of files outside `trees` (a switch of the active set): an old tree's
    /// responses are never asked for again, yet cost memory (or address space and the tree's disk
    /// space, for maps) until evicted. A connection still sending one keeps it alive until done.
    func keepOnly(trees: [String]) {
        let prefixes = trees.map { $0 + "/" }
        let removed = state.withLock { state in
            state.entries.removeAll { path in !prefixes.contains { path.hasPrefix($0) } }
        }
        for (_, entry) in removed { drop(entry) }
    }

    /// Drops every entry (a lane that opened under load, when its last connection closes).
    func removeAll() { keepOnly(trees: []) }

    deinit { shared?.give(usage.bytes) }

    /// Bytes held and entries, for tests.
    var usage: (bytes: Int, entries: Int) { state.withLock { ($0.entries.bytes, $0.entries.count) } }
}

/// The memory cache capacity the lanes' copied caches share (`PackageStore.Options.memoryCacheCapacity`).
/// Each lane takes bytes as it caches a file and gives them back as it evicts one, so the one lane a
/// web view uses has all of it, as one cache would, and lanes that open under load take what is free
/// (`LoopbackServer.ThreadModel.elastic`). An atomic count: no lane waits on another.
final class SharedBytes: Sendable {
    let capacity: Int
    private let held = Atomic<Int>(0)

    init(capacity: Int) { self.capacity = max(0, capacity) }

    /// Takes `bytes` if they fit within the capacity with what the lanes hold.
    func take(_ bytes: Int) -> Bool {
        var current = held.load(ordering: .relaxed)
        while current <= capacity - bytes {
            let (exchanged, original) = held.compareExchange(
                expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func give(_ bytes: Int) { held.subtract(bytes, ordering: .relaxed) }

    /// Bytes the lanes hold now (tests).
    var used: Int { held.load(ordering: .relaxed) }
}
