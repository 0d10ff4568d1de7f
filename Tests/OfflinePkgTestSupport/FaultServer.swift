import Foundation
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How `FaultServer` answers one request for a path.
public enum FaultBehaviour: Sendable, Equatable {
    /// 200 with the file; 206 + Content-Range for `Range: bytes=N-` / `bytes=N-M` (unless an
    /// `If-Range` names another ETag); 304 on a matching `If-None-Match`; 404 for a missing file.
    case normal
    /// The given status with a short text body and, when set, a `Retry-After` header.
    case status(Int, retryAfter: String? = nil)
    /// The normal headers (full Content-Length), `bytes` of body, then an RST (SO_LINGER 0).
    case resetAfter(bytes: Int)
    /// The normal headers (full Content-Length), `bytes` of body, then a clean close (FIN).
    case truncateAfter(bytes: Int)
    /// The normal headers, `afterBytes` of body, then silence for `seconds`, then a clean close.
    case stall(afterBytes: Int, seconds: Double)
    /// A redirect to `location` with an empty body.
    case redirect(to: String, status: Int = 302)
    /// The normal response, with the last byte of the body held back for `seconds`: a transfer that
    /// takes at least that long, for tests of what runs side by side.
    case holdLastByte(seconds: Double)
    /// The normal response, its head (and all) held back for `seconds`: a server that is slow to answer
    /// at all, as a far one is.
    case holdHead(seconds: Double)
    /// The normal response, its head held back for at least `seconds` and then until `count` requests
    /// whose path starts with `prefix` were answered (at most 20 s in all): an answer that comes after
    /// others the client should have asked meanwhile, however slowly the client's threads run.
    case holdHeadUntil(count: Int, prefix: String, seconds: Double)
    /// The normal headers (full Content-Length), then one body byte every `every` seconds, for at most
    /// `seconds` in all, then a clean close: a slow-retrieval attack that resets a stall clock forever.
    case trickle(every: Double, seconds: Double)
    /// The normal response, paused for `seconds` after the first `bytes` of the body: a moment for a test
    /// to change the world (fill the client's disk) in the middle of a transfer.
    case pauseAfter(bytes: Int, seconds: Double)
    /// A true `206 multipart/byteranges` answer to a request for several ranges (`Range: bytes=a-b,c-d`)
    /// of the file, sent one byte every `every` seconds for at most `seconds`: a server that trickles a
    /// multipart answer (nearly) for ever.
    case trickleRanges(every: Double, seconds: Double)
    /// Exactly this answer, whatever was asked: a hand-made 206 (a garbled multipart body, a part
    /// nobody asked for). `Content-Length` is added from the body.
    case respond(status: Int, headers: [String: String], body: [UInt8])
}

/// A request as `FaultServer` saw it, with how much body it answered with.
public struct RecordedRequest: Sendable, Equatable {
    public var method: String
    /// The request target as sent, query included.
    public var target: String
    /// The path the script is keyed by: the target without its query.
    public var path: String
    /// Header names lowercased; a repeated header keeps its last value.
    public var headers: [String: String]
    public var status: Int
    public var behaviour: FaultBehaviour
    public var bodyBytesSent: Int
    /// When the request head had been read.
    public var receivedAt: Date
    /// When the answer was complete but for its last byte (headers only: when they were sent). The
    /// client cannot have finished before this moment, so two requests of a client that waits for one
    /// answer before it sends the next request never overlap from `receivedAt` to `answeredAt`.
    public var answeredAt: Date
}

/// A small scripted HTTP/1.1 server on 127.0.0.1 for the failures nginx cannot produce on demand:
/// resets, truncations and stalls mid-body, 5xx with Retry-After. It serves the files of a folder;
/// a per-path script decides each successive request for that path, then `.normal` takes over.
/// One thread accepts, one thread per connection answers, and every connection closes after one
/// response. It stops on `stop()`, on deinit, or by itself after `maxLifetime` seconds.
public final class FaultServer: Sendable {
    public let baseURL: URL
    public let port: Int
    public let documentRoot: String
    // The threads hold the engine, not the server, so dropping the server stops them via deinit.
    private let engine: FaultEngine

    public init(documentRoot: String, maxLifetime: Double = 600) throws {
        self.documentRoot = documentRoot
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else {
            throw TestSupportError("fault server: cannot create a socket: \(String(cString: strerror(errno)))")
        }
        var address = loopback(port: 0)  // the kernel picks a free port: no races with other tests
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 64) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw TestSupportError("fault server: cannot listen on 127.0.0.1: \(reason)")
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        baseURL = URL(string: "http://127.0.0.1:\(port)/")!
        engine = FaultEngine(documentRoot: documentRoot)
        engine.start(listener, until: Date().addingTimeInterval(maxLifetime))
    }

    deinit { stop() }

    /// The URL of `path` (relative, no leading slash) on this server.
    public func url(_ path: String) -> URL { URL(string: path, relativeTo: baseURL)!.absoluteURL }

    /// Sets how the next requests for `path` (e.g. `/a.tar.gz`) are answered, one behaviour each,
    /// replacing any script left for it.
    public func script(_ path: String, _ behaviours: [FaultBehaviour]) {
        engine.state.withLock { $0.scripts[path.hasPrefix("/") ? path : "/" + path] = behaviours }
    }

    /// Every request answered so far, in the order the answers were written.
    public var requests: [RecordedRequest] { engine.state.withLock { $0.requests } }

    /// The requests for `path` (a leading `/` is optional).
    public func requests(for path: String) -> [RecordedRequest] {
        let wanted = path.hasPrefix("/") ? path : "/" + path
        return requests.filter { $0.path == wanted }
    }

    /// Stops accepting, cuts stalls short, and waits (up to 5 s) for every thread to finish.
    public func stop() {
        engine.state.withLock { $0.stopped = true }
        let deadline = Date().addingTimeInterval(5)
        while engine.state.withLock({ $0.threads }) > 0 && Date() < deadline { usleep(2_000) }
    }
}

/// The listening socket's loop and the per-connection answers, shared by the server's threads.
final class FaultEngine: Sendable {
    struct State {
        var scripts: [String: [FaultBehaviour]] = [:]
        var requests: [RecordedRequest] = []
        var stopped = false
        var threads = 0
    }
    let state = Mutex(State())
    let documentRoot: String

    init(documentRoot: String) { self.documentRoot = documentRoot }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    func start(_ listener: Int32, until deadline: Date) {
        state.withLock { $0.threads = 1 }
        Thread { [self] in acceptLoop(listener, until: deadline) }.start()
    }

    // MARK: - Connections

    private func acceptLoop(_ listener: Int32, until deadline: Date) {
        defer {
            close(listener)
            state.withLock {
                $0.stopped = true
                $0.threads -= 1
            }
        }
        // Polls in short slices so that stop() and the lifetime bound take effect promptly.
        while !isStopped && Date() < deadline {
            var entry = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 50) > 0 else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            state.withLock { $0.threads += 1 }
            Thread { [self] in
                serve(connection)
                state.withLock { $0.threads -= 1 }
            }.start()
        }
    }

    private func serve(_ connection: Int32) {
        guard let request = readRequest(connection) else {
            close(connection)
            return
        }
        let behaviour = state.withLock { state -> FaultBehaviour in
            guard var script = state.scripts[request.path], !script.isEmpty else { return .normal }
            let next = script.removeFirst()
            state.scripts[request.path] = script
            return next
        }
        let response = makeResponse(for: request, behaviour: behaviour)
        var head = "HTTP/1.1 \(response.status) \(Self.reason(response.status))\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        head += "Connection: close\r\n\r\n"
        let bodyLimit: Int
        switch behaviour {
        case .resetAfter(let bytes), .truncateAfter(let bytes), .stall(let bytes, _): bodyLimit = bytes
        default: bodyLimit = Int.max
        }
        let body = request.method == "HEAD" ? [] : response.body.prefix(bodyLimit)
        if case .holdHead(let seconds) = behaviour { pause(seconds) }
        if case .holdHeadUntil(let count, let prefix, let seconds) = behaviour {
            pause(seconds)
            let end = Date().addingTimeInterval(20 - seconds)
            while !isStopped && Date() < end
                && state.withLock({ $0.requests.filter { $0.path.hasPrefix(prefix) }.count }) < count
            {
                usleep(20_000)
            }
        }
        _ = sendAll(connection, Array(head.utf8))
        var sent = 0
        if case .trickle(let every, let seconds) = behaviour {
            sent = trickle(connection, Array(body), every: every, for: seconds)
        } else if case .trickleRanges(let every, let seconds) = behaviour {
            sent = trickle(connection, Array(body), every: every, for: seconds)
        } else if case .pauseAfter(let bytes, let seconds) = behaviour {
            sent = sendAll(connection, Array(body.prefix(bytes)))
            pause(seconds)
            if sent == min(bytes, body.count) { sent += sendAll(connection, Array(body.dropFirst(bytes).dropLast())) }
        } else {
            sent = sendAll(connection, Array(body.dropLast()))
            if case .holdLastByte(let seconds) = behaviour { pause(seconds) }
        }
        let answeredAt = Date()
        let lastByteDue = sent == body.count - 1

        var record = request
        record.status = response.status
        record.behaviour = behaviour
        record.bodyBytesSent = sent + (lastByteDue ? 1 : 0)
        record.answeredAt = answeredAt
        // Recorded before the last byte goes out: a client that has its whole body (by Content-Length)
        // may return before the connection ends, and must find its request here. Corrected below in
        // the rare case that last byte cannot be sent.
        let index = state.withLock { state -> Int in
            state.requests.append(record)
            return state.requests.count - 1
        }
        if lastByteDue {
            sent += sendAll(connection, Array(body.suffix(1)))
            if sent != body.count { state.withLock { $0.requests[index].bodyBytesSent = sent } }
        }

        switch behaviour {
        case .resetAfter:
            waitUntilSent(connection)
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(connection, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        case .stall(_, let seconds):
            pause(seconds)
        default:
            break
        }
        close(connection)
    }

    /// Sends all but the last byte of `body` one at a time, one every `every` seconds, until `seconds`
    /// have passed, the client hangs up or `stop()`; returns the bytes sent (the caller sends the last
    /// byte only when every other one went out).
    private func trickle(_ connection: Int32, _ body: [UInt8], every: Double, for seconds: Double) -> Int {
        let end = Date().addingTimeInterval(seconds)
        var sent = 0
        while sent < body.count - 1 && !isStopped && Date() < end {
            guard sendAll(connection, [body[sent]]) == 1 else { break }
            sent += 1
            pause(every)
        }
        return sent
    }

    /// Waits `seconds`, cut short by `stop()`.
    private func pause(_ seconds: Double) {
        let end = Date().addingTimeInterval(seconds)
        while !isStopped && Date() < end { usleep(20_000) }
    }

    private struct Response {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]
    }

    private func makeResponse(for request: RecordedRequest, behaviour: FaultBehaviour) -> Response {
        switch behaviour {
        case .status(let code, let retryAfter):
            let body = Array("status \(code)\n".utf8)
            var headers = [("Content-Type", "text/plain"), ("Content-Length", "\(body.count)")]
            if let retryAfter { headers.append(("Retry-After", retryAfter)) }
            return Response(status: code, headers: headers, body: body)
        case .redirect(let location, let code):
            return Response(status: code, headers: [("Location", location), ("Content-Length", "0")], body: [])
        case .respond(let code, let headers, let body):
            return Response(
                status: code, headers: headers.sorted { $0.key < $1.key } + [("Content-Length", "\(body.count)")], body: body)
        case .trickleRanges:
            return multipartResponse(for: request) ?? fileResponse(for: request)
        case .normal, .resetAfter, .truncateAfter, .stall, .holdLastByte, .holdHead, .holdHeadUntil, .trickle, .pauseAfter:
            return fileResponse(for: request)
        }
    }

    private func fileResponse(for request: RecordedRequest) -> Response {
        let relative = request.path.removingPercentEncoding ?? request.path
        guard !relative.split(separator: "/").contains(".."),
            let data = FileManager.default.contents(atPath: documentRoot + relative),
            !relative.hasSuffix("/")
        else {
            return Response(status: 404, headers: [("Content-Length", "10")], body: Array("not found\n".utf8))
        }
        let file = [UInt8](data)
        // Strong and stable across runs: the same bytes always get the same ETag.
        let etag = "\"\(SHA256.hash(file).hex.prefix(16))\""
        var headers = [("ETag", etag), ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if request.headers["if-none-match"] == etag {
            return Response(status: 304, headers: headers, body: [])
        }
        let ifRangeMatches = request.headers["if-range"].map { $0 == etag } ?? true
        if ifRangeMatches, let range = request.headers["range"].flatMap({ Self.parseRange($0, size: file.count) }) {
            guard let range = range else {
                headers.append(("Content-Range", "bytes */\(file.count)"))
                headers.append(("Content-Length", "0"))
                return Response(status: 416, headers: headers, body: [])
            }
            headers.append(("Content-Range", "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(file.count)"))
            headers.append(("Content-Length", "\(range.count)"))
            return Response(status: 206, headers: headers, body: Array(file[range]))
        }
        headers.append(("Content-Length", "\(file.count)"))
        return Response(status: 200, headers: headers, body: file)
    }

    /// The `multipart/byteranges` answer to `Range: bytes=a-b,c-d,…` (nil for anything else).
    private func multipartResponse(for request: RecordedRequest) -> Response? {
        guard let data = FileManager.default.contents(atPath: documentRoot + request.path),
            let header = request.headers["range"], header.hasPrefix("bytes=")
        else { return nil }
        let file = [UInt8](data)
        let boundary = "fault-server-boundary"
        var body = [UInt8]()
        for spec in header.dropFirst(6).split(separator: ",") {
            let bounds = spec.split(separator: "-").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            guard bounds.count == 2, bounds[0] <= bounds[1], bounds[1] < file.count else { return nil }
            body += Array(
                "\r\n--\(boundary)\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes \(bounds[0])-\(bounds[1])/\(file.count)\r\n\r\n"
                    .utf8)
            body += file[bounds[0]...bounds[1]]
        }
        body += Array("\r\n--\(boundary)--\r\n".utf8)
        return Response(
            status: 206,
            headers: [("Content-Type", "multipart/byteranges; boundary=\(boundary)"), ("Content-Length", "\(body.count)")], body: body)
    }

    /// `bytes=N-` or `bytes=N-M`: nil when the header is not a single byte range (ignored, as
    /// servers do), `.some(nil)` when it cannot be satisfied (416).
    private static func parseRange(_ header: String, size: Int) -> Range<Int>?? {
        guard header.hasPrefix("bytes="), !header.contains(",") else { return nil }
        let bounds = header.dropFirst(6).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let start = Int(bounds[0]) else { return nil }
        let end = bounds[1].isEmpty ? size - 1 : Int(bounds[1]).map { min($0, size - 1) }
        guard let end else { return nil }
        return .some(start < size && start <= end ? start..<(end + 1) : nil)
    }
}
