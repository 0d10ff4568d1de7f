import FoundationEssentials
import Synchronization

/// What one upstream request came to.
enum FetchOutcome: Sendable {
    /// A 200 that is now the stored answer.
    case stored(StoredAnswer)
    /// A 304 that renewed the stored answer.
    case renewed(StoredAnswer)
    /// An answer that was not stored (another status, `no-store`, `Vary: *`, too large, a strategy that
    /// stores nothing), its body in a temporary file; `refusal` says why it was not stored.
    case transient(status: Int, fields: [(name: String, value: String)], path: String, length: Int64, refusal: String)

    var status: Int {
        switch self {
        case .stored, .renewed: 200
        case .transient(let status, _, _, _, _): status
        }
    }
}

/// Receives a body into a temporary file, keeping a copy in memory while it is small enough for the
/// hot set. Touched only from the transfer's own thread.
private final class BodySink: @unchecked Sendable {
    let path: String
    let descriptor: FileDescriptor
    let memoryLimit: Int
    var head: TransferResponseHead?
    var length: Int64 = 0
    var data: Data? = Data()
    private var closed = false

    init(path: String, descriptor: FileDescriptor, memoryLimit: Int) {
        self.path = path
        self.descriptor = descriptor
        self.memoryLimit = memoryLimit
    }

    func write(_ chunk: UnsafeRawBufferPointer) throws {
        try descriptor.writeAll(chunk, path: path)
        length += Int64(chunk.count)
        if data != nil {
            if length <= Int64(memoryLimit) { data!.append(contentsOf: chunk) } else { data = nil }
        }
    }

    /// Closes the file once (a second close could close a descriptor another thread just opened).
    func close() {
        guard !closed else { return }
        closed = true
        descriptor.close()
    }

    func discard() {
        close()
        FileSystem.discardFile(path)
    }
}

extension RuntimeCache {
    /// The request fields sent upstream: the client's end-to-end ones, less those the cache sets itself.
    static func forwardedFields(_ fields: [(name: String, value: String)]) -> [(String, String)] {
        HTTPCachePolicy.endToEnd(fields).filter { !HTTPCachePolicy.requestFieldsNotForwarded.contains($0.name.lowercased()) }
            .map { ($0.name, $0.value) }
    }

    /// One upstream request, shared by every caller asking for the same URL and variant while it runs.
    /// The refresh goes on when a caller stops waiting (a network-first timeout): its answer is stored.
    func sharedFetch(_ request: RuntimeRequest, upstream: String, stored: StoredAnswer?, storing: Bool) async throws
        -> FetchOutcome
    {
        // A refresh is shared per stored variant. A miss is shared by requests with the same fields: the
        // answer's Vary is not known yet, and a request for another variant must not get this one's.
        let key: String
        if let stored {
            key = stored.head.variant
        } else {
            key =
                ([upstream] + Self.forwardedFields(request.fields).map { "\($0.0.lowercased()): \($0.1)" }.sorted())
                .joined(separator: "\n") + (storing ? "" : "\nnot-stored")
        }
        let (task, leader) = inFlight.withLock { running -> (Task<FetchOutcome, Error>, Bool) in
            if let task = running[key] { return (task, false) }
            let task = Task {
                defer { _ = self.inFlight.withLock { $0.removeValue(forKey: key) } }
                return try await self.fetch(request, upstream: upstream, stored: stored, storing: storing)
            }
            running[key] = task
            return (task, true)
        }
        let outcome = try await task.value
        // A body that was not stored is one file for one reader: a caller that joined fetches its own.
        if case .transient = outcome, !leader {
            return try await fetch(request, upstream: upstream, stored: stored, storing: storing)
        }
        return outcome
    }

    /// Starts a background refresh of a stale answer unless one runs for it already or the bound of
    /// background refreshes is reached. Returns whether one runs now.
    @discardableResult
    func refreshInBackground(_ request: RuntimeRequest, upstream: String, stored: StoredAnswer) -> Bool {
        if inFlight.withLock({ $0[stored.head.variant] != nil }) { return true }
        guard backgroundRunning.add(1, ordering: .relaxed).newValue <= options.backgroundRefreshes else {
            backgroundRunning.subtract(1, ordering: .relaxed)
            return false
        }
        var request = request
        request.method = "GET"
        Task.detached {
            defer { self.backgroundRunning.subtract(1, ordering: .relaxed) }
            do {
                let outcome = try await self.sharedFetch(request, upstream: upstream, stored: stored, storing: true)
                if case .renewed = outcome { self.statistics.count { $0.revalidations += 1 } }
                if case .transient(_, _, let path, _, _) = outcome { FileSystem.discardFile(path) }
            } catch {
                self.statistics.count { $0.networkErrors += 1 }
            }
        }
        return true
    }

    /// One upstream request through the download transport (TLS, no https→http redirects, timeouts).
    /// A GET is retried once after a connection error before any byte arrived; other methods never are.
    func fetch(_ request: RuntimeRequest, upstream: String, stored: StoredAnswer?, storing: Bool) async throws -> FetchOutcome {
        let idempotent = request.method == "GET" || request.method == "HEAD"
        do {
            return try await fetchOnce(request, upstream: upstream, stored: stored, storing: storing)
        } catch OfflinePkgError.transfer(_, let failure) where failure.isRetryable && idempotent {
            return try await fetchOnce(request, upstream: upstream, stored: stored, storing: storing)
        }
    }

    private func fetchOnce(_ request: RuntimeRequest, upstream: String, stored: StoredAnswer?, storing: Bool) async throws
        -> FetchOutcome
    {
        guard let url = URL(string: upstream) else {
            throw OfflinePkgError.transfer(url: upstream, failure: .invalidURL)
        }
        let isRead = request.method == "GET" || request.method == "HEAD"
        var headers = Self.forwardedFields(request.fields)
        if isRead, let stored {
            if let etag = stored.head.etag { headers.append(("If-None-Match", etag)) }
            if let lastModified = stored.head.lastModified { headers.append(("If-Modified-Since", lastModified)) }
        }
        var transfer = TransferRequest(
            url: url, headers: headers, limits: RetrievalLimits(stallTimeout: options.stallTimeout),
            connectTimeout: options.connectTimeout, caBundle: options.caBundle)
        // A HEAD is answered from a GET, which can then be stored.
        transfer.method = isRead ? "GET" : request.method
        transfer.body = request.body
        transfer.bodyLength = request.bodyLength
        transfer.resolve = options.resolve

        let temporary = try store.temporaryFile()
        let sink = BodySink(
            path: temporary.path, descriptor: temporary.descriptor, memoryLimit: min(store.limits.memory / 8, 1 << 20))
        let head: TransferResponseHead
        do {
            head = try await transport.get(transfer, onResponse: { sink.head = $0 }, onBody: { try sink.write($0) })
        } catch {
            sink.discard()
            throw error
        }
        // Commits fsync: on a thread of their own, never on the cooperative pool that serves every task.
        let store = store
        if head.status == 304, let stored {
            sink.discard()
            let now = world.clock.now()
            return .renewed(try await runBlocking { try store.renew(stored, notModified: head.fields, at: now) })
        }
        let fields = HTTPCachePolicy.endToEnd(head.fields)
        var refusal = storing ? nil : "not stored by this rule"
        if refusal == nil, !isRead { refusal = "method \(request.method)" }
        if refusal == nil {
            refusal = HTTPCachePolicy.refusal(status: head.status, fields: fields, requestFields: request.fields)
        }
        if refusal == nil, sink.length > store.largestBody {
            refusal = "larger than a quarter of the disk limit (\(sink.length) bytes)"
        }
        if let refusal {
            sink.close()
            return .transient(status: head.status, fields: fields, path: sink.path, length: sink.length, refusal: refusal)
        }
        let vary = HTTPCachePolicy.vary(fields)
        let entry = RuntimeEntryHead(
            url: upstream, vary: vary, varyValues: HTTPCachePolicy.varyValues(vary, request: request.fields), status: 200,
            headers: RuntimeEntryHead.pairs(fields), storedAt: world.clock.now().timeIntervalSince1970, body: "", size: sink.length)
        let data = sink.data
        return .stored(
            try await runBlocking {
                do {
                    try sink.descriptor.sync(path: sink.path)
                    sink.close()
                    return try store.commit(temporary: sink.path, head: entry, data: data)
                } catch {
                    sink.discard()
                    throw error
                }
            })
    }
}

/// Waits for `task` at most `seconds`; nil when the time ran out first. The task itself goes on.
func result<T: Sendable>(of task: @escaping @Sendable () async throws -> T, within seconds: Double) async -> Result<T, Error>? {
    await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, Error>?, Never>) in
        let once = OnceContinuation(continuation)
        let timer = Task {
            try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            once.resume(nil)
        }
        Task {
            let outcome: Result<T, Error>
            do { outcome = .success(try await task()) } catch { outcome = .failure(error) }
            timer.cancel()
            if !once.resume(outcome), case .success(let value) = outcome, let fetched = value as? FetchOutcome,
                case .transient(_, _, let path, _, _) = fetched
            {
                // Nobody reads a body that came after the timeout.
                FileSystem.discardFile(path)
            }
        }
    }
}

/// A continuation resumed by whichever side comes first.
private final class OnceContinuation<T: Sendable>: Sendable {
    private let continuation: Mutex<CheckedContinuation<T, Never>?>

    init(_ continuation: CheckedContinuation<T, Never>) { self.continuation = Mutex(continuation) }

    /// Resumes with `value` unless another side did; returns whether this one did.
    @discardableResult
    func resume(_ value: T) -> Bool {
        guard let waiting = continuation.withLock({ $0.take() }) else { return false }
        waiting.resume(returning: value)
        return true
    }
}
