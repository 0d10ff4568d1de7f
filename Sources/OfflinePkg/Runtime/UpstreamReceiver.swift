import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Receives one upstream answer for `RuntimeCache.fetch` and decides, when its head arrives, where the
/// body goes: into a temporary file to be stored (and into memory while small enough for the hot
/// set), or, for an answer that will not be stored, straight through to the client (`RuntimeStream`),
/// never whole onto the disk (docs/protocol.md#neighbours-on-the-device). An answer that was to be stored and grows past the largest
/// body stored turns into a streamed one mid-way, the part already received read back first.
///
/// The outcome is known at the head for a streamed answer, at the end for a stored one; the transfer
/// goes on after it for the former.
final class UpstreamReceiver: @unchecked Sendable {
    // @unchecked: `mode` and the sink are touched only from the transfer's own thread (libcurl's
    // callbacks, then the end of the transfer); `decision` is thread-safe.
    private let cache: RuntimeCache
    private let request: RuntimeRequest
    private let route: RuntimeRoute
    private let stored: StoredAnswer?
    /// Why the answer will not be stored whatever it is (a strategy, a method), or nil.
    private let refusal: String?
    private let decision = Decision()

    private enum Mode {
        case waiting
        case storing(BodySink, TransferResponseHead)
        case renewing
        case streaming(RuntimeStream)
    }

    private var mode = Mode.waiting

    init(cache: RuntimeCache, request: RuntimeRequest, route: RuntimeRoute, stored: StoredAnswer?, refusal: String?) {
        self.cache = cache
        self.request = request
        self.route = route
        self.stored = stored
        self.refusal = refusal
    }

    /// The outcome, once known.
    func outcome() async throws -> FetchOutcome { try await decision.value() }

    /// The head arrived (before the first body byte, or at the end of an empty answer).
    func begin(_ head: TransferResponseHead) throws {
        if head.status == 304, stored != nil {
            mode = .renewing
            return
        }
        let fields = HTTPCachePolicy.endToEnd(head.fields)
        let store = cache.store
        var refusal =
            refusal
            ?? HTTPCachePolicy.refusal(
                status: head.status, fields: fields, requestFields: request.fields, separate: route.rule.separatesCredentials)
        if refusal == nil, let declared = head.declaredTotalLength, declared > store.largestBody {
            refusal = "larger than a quarter of the disk limit (\(declared) bytes)"
        }
        if let refusal {
            stream(status: head.status, fields: fields, length: Self.length(head), prefix: nil, refusal: refusal)
            return
        }
        let temporary = try store.temporaryFile()
        mode = .storing(
            BodySink(path: temporary.path, descriptor: temporary.descriptor, memoryLimit: min(store.limits.memory / 8, 1 << 20)),
            head)
    }

    /// A chunk of the body.
    func write(_ chunk: UnsafeRawBufferPointer) throws {
        switch mode {
        case .streaming(let body):
            try body.write(chunk, stallTimeout: cache.options.stallTimeout)
        case .storing(let sink, let head):
            try sink.write(chunk)
            guard sink.length > cache.store.largestBody else { return }
            // Too large to store after all: what is on disk is read back, then the rest streams through.
            let reader = open(sink.path, O_RDONLY | O_CLOEXEC)
            sink.discard()
            guard reader >= 0 else { throw OfflinePkgError.io(path: sink.path, operation: "open", Errno.current) }
            stream(
                status: head.status, fields: HTTPCachePolicy.endToEnd(head.fields), length: Self.length(head),
                prefix: (reader, sink.length), refusal: "larger than a quarter of the disk limit")
        case .waiting, .renewing:
            break
        }
    }

    /// The transfer ended well: the stored or renewed answer is committed; a streamed body ends.
    func finish(_ head: TransferResponseHead) async {
        let store = cache.store
        let setCookies = head.fields.filter { HTTPCachePolicy.isPerClient($0.name.lowercased()) }
        switch mode {
        case .streaming(let body):
            body.finish(nil)
        case .renewing:
            guard let stored else { return }
            let now = cache.world.clock.now()
            // Commits touch the disk: on a thread of their own, never on the cooperative pool.
            decision.resolve(
                await resultOf {
                    .renewed(
                        try await runBlocking { try store.renew(stored, notModified: head.fields, at: now) },
                        setCookies: setCookies)
                })
        case .storing(let sink, _):
            let fields = HTTPCachePolicy.endToEnd(head.fields)
            let vary = HTTPCachePolicy.vary(fields)
            let entry = RuntimeEntryHead(
                url: route.upstream, vary: vary, varyValues: HTTPCachePolicy.varyValues(vary, request: request.fields),
                status: 200, headers: RuntimeEntryHead.pairs(fields), storedAt: cache.world.clock.now().timeIntervalSince1970, body: "",
                size: sink.length,
                credential: route.rule.separatesCredentials ? HTTPCachePolicy.credentialHash(request.fields) : nil)
            let data = sink.data
            decision.resolve(
                await resultOf {
                    .stored(
                        try await runBlocking {
                            do {
                                try sink.descriptor.sync(path: sink.path)
                                sink.close()
                                return try store.commit(temporary: sink.path, head: entry, data: data)
                            } catch {
                                sink.discard()
                                throw error
                            }
                        }, setCookies: setCookies)
                })
        case .waiting:
            decision.resolve(.failure(OfflinePkgError.transfer(url: route.upstream, failure: .other(detail: "no answer"))))
        }
    }

    /// The transfer failed: before its outcome was known, that is the outcome; after, a streamed body
    /// ends short.
    func fail(_ error: Error) {
        switch mode {
        case .streaming(let body): body.finish(error)
        case .storing(let sink, _): sink.discard()
        case .waiting, .renewing: break
        }
        decision.resolve(.failure(error))
    }

    private func stream(
        status: Int, fields: [(name: String, value: String)], length: Int64?, prefix: (descriptor: Int32, length: Int64)?,
        refusal: String
    ) {
        let body = RuntimeStream(length: length, prefix: prefix)
        mode = .streaming(body)
        decision.resolve(.success(.streamed(status: status, fields: fields, body: body, refusal: refusal)))
    }

    /// The body's length as the answer declares it, when it does.
    private static func length(_ head: TransferResponseHead) -> Int64? {
        head.headers["content-length"].flatMap { Int64($0.trimmingWhitespace()) }
    }

    /// The outcome, set once, awaited by the request.
    private final class Decision: Sendable {
        private struct State {
            var result: Result<FetchOutcome, Error>?
            var waiting: CheckedContinuation<FetchOutcome, Error>?
        }

        private let state = Mutex(State())

        func resolve(_ result: Result<FetchOutcome, Error>) {
            let waiting = state.withLock { state -> CheckedContinuation<FetchOutcome, Error>? in
                guard state.result == nil else { return nil }
                state.result = result
                defer { state.waiting = nil }
                return state.waiting
            }
            waiting?.resume(with: result)
        }

        func value() async throws -> FetchOutcome {
            try await withCheckedThrowingContinuation { continuation in
                let ready = state.withLock { state -> Result<FetchOutcome, Error>? in
                    if let result = state.result { return result }
                    state.waiting = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        }
    }
}

/// The result of `body`, a thrown error as a failure.
private func resultOf(_ body: () async throws -> FetchOutcome) async -> Result<FetchOutcome, Error> {
    do { return .success(try await body()) } catch { return .failure(error) }
}

/// Receives a body into a temporary file, keeping a copy in memory while it is small enough for the
/// hot set. Touched only from the transfer's own thread.
final class BodySink: @unchecked Sendable {
    let path: String
    let descriptor: FileDescriptor
    let memoryLimit: Int
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
