internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Answers what no package answers from the runtime cache (docs/protocol.md#the-runtime-cache), for `RequestHandler`.
///
/// A hit is answered on MHD's thread at once. An answer that waits on the network suspends the
/// connection (`MHD_suspend_connection`), so the thread serves its other connections meanwhile; the
/// answer is queued when MHD calls back after `MHD_resume_connection`. In the thread-per-connection
/// model, where MHD cannot suspend, the connection's own thread waits.
final class RuntimeCacheResponder: Sendable {
    let cache: RuntimeCache
    private let canSuspend: Bool
    /// Exchanges waiting for MHD to call back for their connection, by connection address.
    private let waiting = Mutex<[UInt: RuntimeExchange]>([:])
    private let waitingCount = Atomic<Int>(0)
    /// Passed-through requests whose connection is suspended, for `abandonWaiting`.
    private let passing = Mutex<[ObjectIdentifier: RuntimeExchange]>([:])
    /// Bodies being streamed from upstream to a client (`StreamedResponse`), for `abandonWaiting`.
    let streaming = StreamedResponses()

    init(cache: RuntimeCache, canSuspend: Bool) {
        self.cache = cache
        self.canSuspend = canSuspend
    }

    /// The absolute URL of a request: an absolute-form target as it is, else `http://` + `Host` + target;
    /// with the query as the client sent it (`RecordedTarget`: MHD hands over the target without it).
    static func requestURL(_ connection: OpaquePointer, target: UnsafePointer<CChar>) -> String? {
        var url = String(cString: target)
        if url.hasPrefix("/") {
            guard let host = MHD_lookup_connection_value(connection, .HEADER_KIND, "Host") else { return nil }
            url = "http://" + String(cString: host) + url
        }
        if let query = recordedTarget(connection)?.currentQuery { url += "?" + query }
        return url
    }

    static func requestFields(_ connection: OpaquePointer) -> [(name: String, value: String)] {
        final class Collected { var fields: [(name: String, value: String)] = [] }
        let collected = Collected()
        withExtendedLifetime(collected) {
            _ = MHD_get_connection_values(
                connection, .HEADER_KIND,
                { context, _, key, value in
                    guard let context, let key else { return .YES }
                    let collected = Unmanaged<Collected>.fromOpaque(context).takeUnretainedValue()
                    collected.fields.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
                    return .YES
                }, Unmanaged.passUnretained(collected).toOpaque())
        }
        return collected.fields
    }

    /// The route and request for a connection whose URL a rule covers, or nil.
    private func request(_ connection: OpaquePointer, target: UnsafePointer<CChar>, method: String) -> (
        RuntimeRoute, RuntimeRequest
    )? {
        guard let url = Self.requestURL(connection, target: target), let route = cache.route(for: url) else { return nil }
        return (route, RuntimeRequest(url: url, method: method, fields: Self.requestFields(connection)))
    }

    // MARK: GET and HEAD, at the request's last call

    /// Answers a GET or HEAD that no package answers; nil when no rule covers the URL (a 404 then).
    func respond(_ connection: OpaquePointer, target: UnsafePointer<CChar>, method: UnsafePointer<CChar>) -> MHD_Result? {
        guard let (route, request) = request(connection, target: target, method: String(cString: method)) else { return nil }
        if let answer = cache.answerWithoutWaiting(request, route: route) { return queue(answer, on: connection) }
        let exchange = RuntimeExchange()
        if canSuspend {
            waiting.withLock { $0[UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))] = exchange }
            waitingCount.add(1, ordering: .releasing)
            exchange.suspend(connection)
        }
        let cache = cache
        Task.detached { exchange.finish(await cache.answer(request, route: route)) }
        if canSuspend { return .YES }
        return queue(exchange.wait(), on: connection)
    }

    /// Called at the first call of every request: queues the answer of an exchange that suspended this
    /// connection and was resumed; nil when there is none (one atomic load when nothing waits).
    func resumed(_ connection: OpaquePointer) -> MHD_Result? {
        guard waitingCount.load(ordering: .acquiring) > 0 else { return nil }
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
        guard let exchange = waiting.withLock({ $0[key] }), exchange.isFinished else { return nil }
        waiting.withLock { _ = $0.removeValue(forKey: key) }
        waitingCount.subtract(1, ordering: .releasing)
        return queue(exchange.answer, on: connection)
    }

    // MARK: Other methods, from the request's first call

    /// Starts passing a request of another method than GET and HEAD to the network, when a rule covers
    /// its URL: the body is streamed to the upstream request through a pipe as MHD hands it over. A
    /// request that fails the loopback server's checks is never forwarded (docs/protocol.md#neighbours-on-the-device): it is left to the access
    /// handler's last call, which answers 400.
    func beginPassThrough(
        _ connection: OpaquePointer, target: UnsafePointer<CChar>, method: UnsafePointer<CChar>, version: UnsafePointer<CChar>?
    ) -> RuntimeExchange? {
        guard strcmp(method, "GET") != 0, strcmp(method, "HEAD") != 0,
            RequestChecks.problem(connection, target: target, version: version) == nil
        else { return nil }
        let name = String(cString: method)
        guard let (route, found) = request(connection, target: target, method: name) else { return nil }
        var request = found
        if let length = HTTPCachePolicy.value("content-length", in: request.fields).flatMap({ Int64($0) }) {
            request.bodyLength = length
        } else if HTTPCachePolicy.value("transfer-encoding", in: request.fields) == nil {
            request.bodyLength = 0
        }
        guard let pipeEnds = Self.bodyPipe(for: request.bodyLength) else { return nil }
        let exchange = RuntimeExchange(bodyWriter: pipeEnds[1])
        let reader = PipeReader(descriptor: pipeEnds[0])
        request.body = { reader.read(into: $0) }
        let cache = cache
        Task.detached {
            let answer = await cache.answer(request, route: route)
            // Nothing reads the rest of the body now: the writer gets EPIPE instead of blocking.
            reader.close()
            exchange.finish(answer)
        }
        return exchange
    }

    /// Bytes a pass-through body's pipe holds before a write waits for upstream to read:
    /// `/proc/sys/fs/pipe-max-size`'s default, which any user may ask for. MHD's thread writes the
    /// body in, and a lane serves all its connections (on two cores, all of the server's), so a body of
    /// up to 1 MiB never holds them up, however slow the network; only a larger one waits on upstream.
    static let bodyPipeCapacity: Int32 = 1 << 20

    /// A close-on-exec pipe for a body of `length` bytes (nil: chunked, length unknown). One that fits
    /// the kernel's default 64 KiB keeps it; a larger one asks for `bodyPipeCapacity`. The kernel
    /// charges a pipe's capacity, not its use, to the user's `pipe-user-pages-soft` (64 MiB), past
    /// which every new pipe of that user is small, so the many small bodies of a page never ask.
    /// Where the system refuses (its limits lower), the pipe stays at the default.
    static func bodyPipe(for length: Int64?) -> [Int32]? {
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { return nil }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        if (length ?? .max) > Int64(Socket.pipeCapacity(pipeEnds[1])) { Socket.setPipeCapacity(pipeEnds[1], bodyPipeCapacity) }
        return pipeEnds
    }

    /// The following calls of a passed-through request: body chunks into the pipe, then the answer.
    func step(
        _ exchange: RuntimeExchange, _ connection: OpaquePointer, uploadData: UnsafePointer<CChar>?,
        uploadSize: UnsafeMutablePointer<Int>
    )
        -> (result: MHD_Result, done: Bool)
    {
        if uploadSize.pointee > 0 {
            if let uploadData { exchange.writeBody(UnsafeRawBufferPointer(start: uploadData, count: uploadSize.pointee)) }
            uploadSize.pointee = 0
            return (.YES, false)
        }
        exchange.endBody()
        let key = ObjectIdentifier(exchange)
        if exchange.isFinished {
            passing.withLock { _ = $0.removeValue(forKey: key) }
            return (queue(exchange.answer, on: connection), true)
        }
        guard canSuspend else { return (queue(exchange.wait(), on: connection), true) }
        passing.withLock { $0[key] = exchange }
        if exchange.suspend(connection) { return (.YES, false) }
        passing.withLock { _ = $0.removeValue(forKey: key) }
        return (queue(exchange.answer, on: connection), true)
    }

    /// Resumes every suspended connection before the daemon stops (MHD requires it): each waiting one
    /// is answered 503, each streaming one ends short.
    func abandonWaiting() {
        let pending = waiting.withLock { Array($0.values) } + passing.withLock { Array($0.values) }
        for exchange in pending { exchange.finish(nil) }
        for response in streaming.all { response.abandon() }
    }

    // MARK: Responses

    /// Queues `answer` (nil: the server is stopping) with its fields and `Cache-Status`.
    func queue(_ answer: RuntimeAnswer?, on connection: OpaquePointer) -> MHD_Result {
        guard let answer else {
            let response = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)!
            defer { MHD_destroy_response(response) }
            return MHD_queue_response(connection, UInt32(MHD_HTTP_SERVICE_UNAVAILABLE), response)
        }
        var response: OpaquePointer?
        switch answer.body {
        case .empty:
            response = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)
        case .data(let data):
            response = data.withUnsafeBytes {
                MHD_create_response_from_buffer($0.count, UnsafeMutableRawPointer(mutating: $0.baseAddress), .RESPMEM_MUST_COPY)
            }
        case .streamed(let stream):
            response = StreamedResponse.make(stream, connection: connection, canSuspend: canSuspend, registry: streaming)
        case .stored(let path, let length):
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            if descriptor >= 0 {
                // MHD closes the descriptor with the response; an unlinked or evicted file stays readable.
                response = MHD_create_response_from_fd64(UInt64(length), descriptor)
                if response == nil { close(descriptor) }
            }
        }
        guard let response else {
            // Evicted between the lookup and the open: the client may simply ask again.
            let retry = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)!
            defer { MHD_destroy_response(retry) }
            MHD_add_response_header(retry, "Retry-After", "0")
            MHD_add_response_header(retry, "Cache-Status", "offlinepkg; detail=evicted")
            return MHD_queue_response(connection, UInt32(MHD_HTTP_SERVICE_UNAVAILABLE), retry)
        }
        defer { MHD_destroy_response(response) }
        for field in answer.fields where !Self.setByServer.contains(field.name.lowercased()) {
            MHD_add_response_header(response, field.name, field.value)
        }
        MHD_add_response_header(response, "Cache-Status", answer.cacheStatus)
        return MHD_queue_response(connection, UInt32(answer.status), response)
    }

    /// Fields MHD writes itself from the response it sends.
    private static let setByServer: Set<String> = ["content-length", "transfer-encoding", "connection", "keep-alive", "date"]
}

/// One request waiting on the runtime cache: its answer once there, whether its connection is
/// suspended, and for a passed-through request the pipe its body goes into.
final class RuntimeExchange: Sendable {
    private struct State {
        var answer: RuntimeAnswer?
        var finished = false
        /// The suspended connection's address (`OpaquePointer` is not `Sendable`).
        var connection: UInt?
    }

    private let state = Mutex(State())
    private let writer: Atomic<Int32>

    init(bodyWriter: Int32 = -1) { writer = Atomic(bodyWriter) }

    var answer: RuntimeAnswer? { state.withLock { $0.answer } }
    var isFinished: Bool { state.withLock { $0.finished } }

    /// Suspends `connection` unless the answer is already there; returns whether it did.
    @discardableResult
    func suspend(_ connection: OpaquePointer) -> Bool {
        state.withLock { state in
            guard !state.finished else { return false }
            MHD_suspend_connection(connection)
            state.connection = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
            return true
        }
    }

    /// Records the answer (nil: abandoned) and resumes the connection if it was suspended.
    func finish(_ answer: RuntimeAnswer?) {
        let connection = state.withLock { state -> UInt? in
            guard !state.finished else { return nil }
            state.finished = true
            state.answer = answer
            defer { state.connection = nil }
            return state.connection
        }
        if let connection, let pointer = OpaquePointer(bitPattern: connection) { MHD_resume_connection(pointer) }
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }

    // The thread-per-connection model blocks its own thread (not async code) until the answer is there.
    private let condition = ThreadCondition()

    func wait() -> RuntimeAnswer? {
        condition.lock()
        while !state.withLock({ $0.finished }) { condition.wait() }
        condition.unlock()
        return answer
    }

    func writeBody(_ chunk: UnsafeRawBufferPointer) {
        let descriptor = writer.load(ordering: .relaxed)
        guard descriptor >= 0 else { return }
        var offset = 0
        while offset < chunk.count {
            let written = Glibc.write(descriptor, chunk.baseAddress! + offset, chunk.count - offset)
            if written < 0 && errno == EINTR { continue }
            // EPIPE: the upstream request ended (or never needed the body); the rest is dropped.
            if written <= 0 { return }
            offset += written
        }
    }

    func endBody() {
        let descriptor = writer.exchange(-1, ordering: .relaxed)
        if descriptor >= 0 { close(descriptor) }
    }

    deinit { endBody() }
}

/// The read end of a pass-through body's pipe, read by libcurl's thread (blocking reads are fine there).
private final class PipeReader: Sendable {
    private let descriptor: Atomic<Int32>

    init(descriptor: Int32) { self.descriptor = Atomic(descriptor) }

    /// libcurl's `CURL_READFUNC_ABORT`: a client that stopped sending its body for this long (or went
    /// away: MHD does not tell) ends the upstream request instead of holding its thread.
    static let abort = 0x1000_0000
    static let idleTimeout: Int32 = 30_000

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let fd = descriptor.load(ordering: .relaxed)
        guard fd >= 0 else { return 0 }
        var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while poll(&ready, 1, Self.idleTimeout) < 0 && errno == EINTR {}
        if ready.revents == 0 { return Self.abort }
        while true {
            let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if count < 0 && errno == EINTR { continue }
            return max(0, count)
        }
    }

    func close() {
        let fd = descriptor.exchange(-1, ordering: .relaxed)
        if fd >= 0 { Glibc.close(fd) }
    }

    deinit { close() }
}
