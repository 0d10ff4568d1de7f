internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP/1.1 service that takes request bodies (the install reports collector, docs/protocol.md#install-reports), on the
/// loopback server's machinery: the same accepting thread handing connections to MHD daemons
/// (`ConnectionAcceptor`), the same header and keep-alive deadlines (`ConnectionDeadlines`), the same
/// request checks (`RequestChecks`), daemons started by the same shim. `package`: libmicrohttpd stays
/// imported by this module alone, and the module using this needs none of MHD's types.
///
/// A body is bounded: one announced longer than `maximumBodyBytes` is answered 413 before a byte of it
/// is read, one that grows past it (chunked) is cut off with 413; either closes the connection. The
/// handler runs on the daemon's thread once the whole body is in.
package final class EndpointServer: Sendable {
    /// One request, body complete.
    package struct Request: Sendable {
        package var method: String
        /// The request target as sent (`/reports`, query included).
        package var target: String
        /// Header fields, names lowercased; a repeated one keeps its first value.
        package var headers: [String: String]
        package var body: [UInt8]
    }

    /// The answer to one request.
    package struct Response: Sendable {
        package var status: Int
        package var headers: [(String, String)]
        package var body: [UInt8]

        package init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        /// A short text answer.
        package static func text(_ status: Int, _ text: String, headers: [(String, String)] = []) -> Response {
            Response(
                status: status, headers: [("Content-Type", "text/plain; charset=utf-8")] + headers,
                body: Array((text + "\n").utf8))
        }
    }

    package typealias Handler = @Sendable (Request) -> Response

    package let host: String
    package let maximumBodyBytes: Int
    private let requestedPort: UInt16
    private let address: SocketAddress
    private let lanes: [EndpointLane]
    private let deadlines: ConnectionDeadlines
    private let connectionLimit: Int
    private let limits: LoopbackServer.Limits
    private let state = Mutex<(acceptor: ConnectionAcceptor?, daemons: [Daemon])>((nil, []))

    /// A server on `host` (an IPv4 or IPv6 literal, or `localhost`) and `port` (0: a free one), with
    /// `lanes` daemon threads. Unlike `LoopbackServer` it may listen on any address: a collector is a
    /// network service (behind a TLS proxy, docs/publishing.md).
    package init(
        host: String, port: UInt16, lanes: Int = 2, maximumBodyBytes: Int, limits: LoopbackServer.Limits = .init(),
        handler: @escaping Handler
    ) throws {
        guard let address = SocketAddress(host: host, port: port) else {
            throw OfflinePkgError.invalidArgument("host \(host) is not an IPv4 or IPv6 address")
        }
        guard lanes >= 1, maximumBodyBytes >= 0 else {
            throw OfflinePkgError.invalidArgument("a server needs at least one lane and a body limit of 0 or more bytes")
        }
        self.host = host
        self.requestedPort = port
        self.address = address
        self.maximumBodyBytes = maximumBodyBytes
        self.lanes = (0..<lanes).map { _ in EndpointLane(handler: handler, maximumBodyBytes: maximumBodyBytes) }
        deadlines = ConnectionDeadlines(headerTimeout: limits.headerTimeout, idleTimeout: limits.idleTimeout)
        connectionLimit = LoopbackServer.DescriptorBudget(asked: limits.connectionLimit, lanes: lanes, tls: false).connections
        self.limits = limits
    }

    deinit { stop() }

    /// Binds and starts answering on the daemons' threads; returns at once.
    package func start() throws {
        try state.withLock { state in
            guard state.acceptor == nil else { return }
            let acceptor: ConnectionAcceptor
            do throws(Errno) {
                acceptor = try ConnectionAcceptor(
                    address: address, backlog: 1024, connectionLimit: connectionLimit, deadlines: deadlines)
            } catch {
                throw OfflinePkgError.io(path: "\(host):\(requestedPort)", operation: "listen", error)
            }
            var daemons = [Daemon]()
            do {
                for lane in lanes { daemons.append(try startDaemon(lane)) }
            } catch {
                for daemon in daemons { daemon.stop() }
                acceptor.stop()
                throw error
            }
            deadlines.start()
            acceptor.serve(daemons)
            acceptor.start()
            state = (acceptor, daemons)
        }
    }

    /// Closes the listening socket and every connection; requests being handled finish first.
    package func stop() {
        let (acceptor, daemons) = state.withLock { state in
            defer { state = (nil, []) }
            return state
        }
        acceptor?.stop()
        for daemon in daemons { daemon.stop() }
        if acceptor != nil { deadlines.stop() }
    }

    /// The port listened on: the one asked for, or the one the kernel picked for port 0.
    package var port: UInt16 { state.withLock { $0.acceptor?.port ?? requestedPort } }

    /// `http://host:port/`, IPv6 hosts in brackets.
    package var url: URL {
        let hostPart = address.isIPv6 ? "[\(host)]" : (host == "localhost" ? "127.0.0.1" : host)
        return URL(string: "http://\(hostPart):\(port)/")!
    }

    private func startDaemon(_ lane: EndpointLane) throws -> Daemon {
        let daemon = Daemon(certificate: nil, deadlines: deadlines)
        var config = cmicrohttpd_config()
        config.flags =
            MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_NO_LISTEN_SOCKET.rawValue | MHD_USE_ITC.rawValue
            | MHD_USE_POLL_INTERNAL_THREAD.rawValue | MHD_USE_TURBO.rawValue
        config.idle_timeout = UInt32(limits.idleTimeout.rounded(.up))
        config.connection_memory = LoopbackServer.connectionMemory(headerBytes: limits.requestHeaderBytes)
        config.connection_limit = UInt32(connectionLimit)
        config.handler = handleEndpointRequest
        config.handler_context = Unmanaged.passUnretained(lane).toOpaque()
        config.notify_connection = notifyConnection
        config.notify_completed = endpointRequestCompleted
        config.request_began = requestBegan
        config.notify_context = Unmanaged.passUnretained(daemon).toOpaque()
        guard let pointer = cmicrohttpd_start(&config) else {
            throw OfflinePkgError.io(
                path: "\(host):\(requestedPort)", operation: "start server", Errno(errno == 0 ? ENOMEM : errno))
        }
        daemon.pointer = pointer
        return daemon
    }
}

/// One daemon's handler and limit: the context of `handleEndpointRequest`.
final class EndpointLane: Sendable {
    let handler: EndpointServer.Handler
    let maximumBodyBytes: Int

    init(handler: @escaping EndpointServer.Handler, maximumBodyBytes: Int) {
        self.handler = handler
        self.maximumBodyBytes = maximumBodyBytes
    }

    /// A body past the limit is read and dropped up to this many bytes, so the client is still reading
    /// when its 413 goes; a larger one has its connection closed.
    var drainedAtMost: Int { max(maximumBodyBytes * 8, 1 << 20) }

    func tooLarge(_ announced: Int?) -> EndpointServer.Response {
        .text(
            413, "body too large: \(announced.map { "\($0) bytes announced, " } ?? "")at most \(maximumBodyBytes) bytes are taken"
        )
    }

    /// Queues `response` on `connection`.
    static func queue(_ response: EndpointServer.Response, on connection: OpaquePointer, close: Bool = false) -> MHD_Result {
        let made = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let made else { return .NO }
        defer { MHD_destroy_response(made) }
        for (name, value) in response.headers { MHD_add_response_header(made, name, value) }
        if close { MHD_add_response_header(made, "Connection", "close") }
        return MHD_queue_response(connection, UInt32(response.status), made)
    }
}

/// A request's body as it arrives: the request context MHD keeps between the access handler's calls.
final class PendingBody {
    var bytes = [UInt8]()
    /// Past the limit: what arrives is counted and dropped, and the answer is 413.
    var overflowed = false
    var dropped = 0
    /// The `Content-Length` of a body announced past the limit.
    var announced: Int?
    /// Answered before the body was all in: the rest is not read.
    var answered = false
}

/// MHD's access handler for an `EndpointServer`. A plain function: MHD calls it on its own threads.
///
/// A body past the limit is answered 413 at once when the client waits for `100 Continue` (it sends
/// nothing more) or announced more than `drainedAtMost`; otherwise what arrives is read and dropped and
/// the 413 goes at the end: a server that answers and closes while the client still sends resets the
/// connection, and the client never reads the 413 (curl reported a chunked 2 MiB body's answer as 100).
func handleEndpointRequest(
    context: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
    uploadSize: UnsafeMutablePointer<Int>?, requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let context, let connection, let url, let method, let uploadSize, let requestContext else { return .NO }
    let lane = Unmanaged<EndpointLane>.fromOpaque(context).takeUnretainedValue()
    guard let stored = requestContext.pointee else {
        // The headers are in: checks that need no body, then the body is collected.
        headersArrived(connection)
        if let problem = RequestChecks.problem(connection, target: url, version: version) {
            return EndpointLane.queue(.text(400, "bad request: \(problem)"), on: connection, close: true)
        }
        let pending = PendingBody()
        if let length = header(connection, "Content-Length").flatMap({ Int($0) }), length > lane.maximumBodyBytes {
            let waits = header(connection, "Expect")?.lowercased() == "100-continue"
            if waits || length > lane.drainedAtMost {
                return EndpointLane.queue(lane.tooLarge(length), on: connection, close: true)
            }
            pending.overflowed = true
            pending.announced = length
        }
        requestContext.pointee = Unmanaged.passRetained(pending).toOpaque()
        return .YES
    }
    let pending = Unmanaged<PendingBody>.fromOpaque(stored).takeUnretainedValue()
    if uploadSize.pointee > 0 {
        let count = uploadSize.pointee
        uploadSize.pointee = 0
        if pending.answered { return .YES }
        if !pending.overflowed && pending.bytes.count + count > lane.maximumBodyBytes {
            pending.overflowed = true
            pending.dropped = pending.bytes.count
            pending.bytes = []
        }
        if pending.overflowed {
            pending.dropped += count
            guard pending.dropped <= lane.drainedAtMost else {
                pending.answered = true
                return EndpointLane.queue(lane.tooLarge(pending.announced), on: connection, close: true)
            }
            return .YES
        }
        if let uploadData {
            uploadData.withMemoryRebound(to: UInt8.self, capacity: count) {
                pending.bytes.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
            }
        }
        return .YES
    }
    if pending.answered { return .YES }
    pending.answered = true
    if pending.overflowed { return EndpointLane.queue(lane.tooLarge(pending.announced), on: connection, close: true) }
    var headers = [String: String]()
    for (name, value) in RuntimeCacheResponder.requestFields(connection) where headers[name.lowercased()] == nil {
        headers[name.lowercased()] = value
    }
    let request = EndpointServer.Request(
        method: String(cString: method), target: String(cString: url), headers: headers, body: pending.bytes)
    pending.bytes = []
    return EndpointLane.queue(lane.handler(request), on: connection)
}

private func header(_ connection: OpaquePointer, _ name: String) -> String? {
    MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
}

/// MHD's request-completed notifier for an `EndpointServer`: the keep-alive deadline as for the loopback
/// server, and the request's body released (also for a request whose client went away mid-body).
func endpointRequestCompleted(
    context: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    code: MHD_RequestTerminationCode
) {
    notifyCompleted(context: context, connection: connection, requestContext: requestContext, code: code)
    if let requestContext, let stored = requestContext.pointee {
        Unmanaged<PendingBody>.fromOpaque(stored).release()
        requestContext.pointee = nil
    }
}
