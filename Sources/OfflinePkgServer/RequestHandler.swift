internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Answers one request from the package store (docs/protocol.md#the-loopback-server). MHD calls `handleRequest` on its own
/// threads with this object as context; everything here is immutable or thread-safe.
final class RequestHandler: @unchecked Sendable {
    // @unchecked: the canned responses are created once before the daemon starts and only queued
    // afterwards; MHD reference-counts a queued response under its own lock, so sharing is safe.
    let store: PackageStore
    /// Small files as finished responses (`ResponseCache`): this lane's share of the store's memory
    /// cache capacity.
    let responses: ResponseCache
    /// Larger files, whole, as finished responses over the open file (`ResponseCache.Body.file`,
    /// sent with `sendfile`), or over a shared map behind TLS (`Body.mapped`).
    let largeResponses: ResponseCache
    /// File bytes the large responses may hold: a file up to a quarter of it (16 MiB) is kept; a
    /// larger one is opened and mapped per request.
    static let largeCapacity = 64 << 20
    private let notFound: OpaquePointer
    private let notAllowed: OpaquePointer
    private let damaged: OpaquePointer
    private let unreadable: OpaquePointer
    private let noDescriptor: OpaquePointer
    /// `serve --origin`: what a request to the server's own address stands for.
    private let origin: OriginRewrite?
    /// The listening address as the server was given it (`127.0.0.1`, `::1`, `localhost`), and the
    /// bound port once known: a `Host` naming them is the server's own address.
    private let ownHost: String
    let ownPort = Atomic<UInt16>(0)
    /// `https://` behind TLS, so `Host: m.example.com:443` drops its default port as the client meant.
    private let scheme: StaticString
    /// Plain HTTP: bodies past the caches are sent from the open file with `sendfile`; behind TLS,
    /// from a map (`MappedFileBody`).
    private let sendsFromFile: Bool

    /// Answers what no package answers, per the manifest's runtime rules (docs/protocol.md#the-runtime-cache); nil: 404s.
    let runtime: RuntimeCacheResponder?

    /// `memory`: the memory cache capacity, shared with the other handlers (one per server thread).
    init(
        store: PackageStore, origin: OriginRewrite? = nil, ownHost: String = "127.0.0.1", tls: Bool = false,
        runtime: RuntimeCacheResponder? = nil, memory: SharedBytes, cachedFiles: Int = ResponseCache.openFileLimit
    ) {
        self.store = store
        self.runtime = runtime
        scheme = tls ? "https://" : "http://"
        sendsFromFile = !tls
        self.origin = origin
        self.ownHost = ownHost.lowercased()
        // Each lane caches the same files as one cache of the whole capacity would (up to an eighth of it).
        responses = ResponseCache(sharing: memory, largestFile: memory.capacity / 8)
        largeResponses = ResponseCache(capacity: Self.largeCapacity, body: tls ? .mapped : .file, openFiles: cachedFiles)
        // An old tree's responses go at the switch, not when evicted: kept, they grew serve's memory by
        // ~2.4 KB per file answered from each tree it ever served.
        let (copied, large) = (responses, largeResponses)
        store.whenSwitched { [weak copied, weak large] trees in
            guard let copied, let large else { return false }
            copied.keepOnly(trees: trees)
            large.keepOnly(trees: trees)
            return true
        }
        notFound = Self.textResponse("not found\n")
        notAllowed = Self.textResponse("method not allowed: offlinepkg serve answers GET and HEAD\n")
        MHD_add_response_header(notAllowed, "Allow", "GET, HEAD")
        damaged = Self.textResponse(
            "the installed file cannot be read as its index describes it: run offlinepkg verify --repair\n")
        unreadable = Self.textResponse("the server cannot make a response from the file now (out of memory or mappings)\n")
        noDescriptor = Self.textResponse("the server has no file descriptor free now (its open-file limit): try again\n")
        MHD_add_response_header(noDescriptor, "Retry-After", "1")
    }

    deinit {
        MHD_destroy_response(notFound)
        MHD_destroy_response(notAllowed)
        MHD_destroy_response(damaged)
        MHD_destroy_response(unreadable)
        MHD_destroy_response(noDescriptor)
    }

    private static func textResponse(_ text: String) -> OpaquePointer {
        var text = text
        let response = text.withUTF8 { bytes in
            MHD_create_response_from_buffer(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)!
        }
        MHD_add_response_header(response, "Content-Type", "text/plain; charset=utf-8")
        MHD_add_response_header(response, "Cache-Control", "no-cache")
        return response
    }

    func handle(
        _ connection: OpaquePointer, target: UnsafePointer<CChar>, method: UnsafePointer<CChar>, version: UnsafePointer<CChar>?
    ) -> MHD_Result {
        if let problem = RequestChecks.problem(connection, target: target, version: version) {
            return answerBadRequest(connection, problem)
        }
        let isGet = strcmp(method, "GET") == 0
        guard isGet || strcmp(method, "HEAD") == 0 else {
            return MHD_queue_response(connection, UInt32(MHD_HTTP_METHOD_NOT_ALLOWED), notAllowed)
        }
        guard let resource = resolve(connection, target: target) else {
            if isFolderWithoutSlash(connection, target: target) { return answerFolderRedirect(connection, target: target) }
            if let runtime, let answered = runtime.respond(connection, target: target, method: method) { return answered }
            return answerMiss(connection, target: target)
        }
        if let condition = header(connection, "If-None-Match"),
            HTTPConditions.noneMatchHits(Substring(condition), etag: resource.etag)
        {
            if let queued = responses.queue(resource, notModified: true, on: connection) { return queued }
            let response = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)!
            ResponseHeaders.addValidators(response, resource)
            defer { MHD_destroy_response(response) }
            return MHD_queue_response(connection, UInt32(MHD_HTTP_NOT_MODIFIED), response)
        }

        var range = RangeRequest.whole
        if isGet, let value = header(connection, "Range") {
            if let ifRange = header(connection, "If-Range"),
                !HTTPConditions.ifRangeAllows(Substring(ifRange), etag: resource.etag)
            {
                range = .whole
            } else {
                range = RangeRequest(header: Substring(value), size: resource.size)
            }
        }
        if range == .unsatisfiable {
            let response = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)!
            MHD_add_response_header(response, "Content-Range", "bytes */\(resource.size)")
            ResponseHeaders.addValidators(response, resource)
            defer { MHD_destroy_response(response) }
            return MHD_queue_response(connection, UInt32(MHD_HTTP_RANGE_NOT_SATISFIABLE), response)
        }
        if range == .whole {
            if let queued = responses.queue(resource, notModified: false, on: connection) { return queued }
            // A map is only safe while the file keeps its size (`MappedFileBody`): a file truncated
            // behind the index after it was mapped must not be sent from the map (SIGBUS), and one
            // sent from the open file would end short, so its size is checked per request (one stat).
            if Self.sizeOnDisk(resource.path) == resource.size,
                let queued = largeResponses.queue(resource, notModified: false, on: connection)
            {
                if sendsFromFile { sendingFile(connection, path: resource.path, size: resource.size) }
                return queued
            }
        }

        // Files past both caches, ranges, and files that do not read as installed (answered below):
        // opened per request. The path comes from the active set and the tree is read-only, so
        // nothing here goes stale.
        let descriptor = open(resource.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            // Out of descriptors is the server's state, not the file's: a 404 would tell the client
            // an installed file does not exist.
            let busy = errno == EMFILE || errno == ENFILE
            return MHD_queue_response(
                connection, UInt32(busy ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_NOT_FOUND), busy ? noDescriptor : notFound)
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int64(status.st_size) == resource.size else {
            close(descriptor)
            // Changed on disk behind the index: no body is sent that contradicts its Content-Length.
            return MHD_queue_response(connection, UInt32(MHD_HTTP_INTERNAL_SERVER_ERROR), damaged)
        }
        var offset: Int64 = 0
        var length = resource.size
        if case .partial(let start, let end) = range {
            offset = start
            length = end - start + 1
        }
        guard let response = body(descriptor: descriptor, offset: offset, length: length) else {
            return MHD_queue_response(connection, UInt32(MHD_HTTP_SERVICE_UNAVAILABLE), unreadable)
        }
        defer { MHD_destroy_response(response) }
        ResponseHeaders.addContent(response, resource)
        ResponseHeaders.addValidators(response, resource)
        if sendsFromFile { sendingFile(connection, path: resource.path, size: resource.size) }
        if case .partial = range {
            MHD_add_response_header(response, "Content-Range", "bytes \(offset)-\(offset + length - 1)/\(resource.size)")
            return MHD_queue_response(connection, UInt32(MHD_HTTP_PARTIAL_CONTENT), response)
        }
        return MHD_queue_response(connection, UInt32(MHD_HTTP_OK), response)
    }

    /// `length` bytes at `offset` of the open file, as a response that owns `descriptor` from here
    /// on: behind plain HTTP the file itself, sent with `sendfile` (MHD closes it with the response),
    /// as the large-file cache's entries are; behind TLS a map of the part asked for, which GnuTLS
    /// reads at once where MHD would read the file in 16 KiB blocks. Nil (the file closed) when no
    /// response can be made.
    private func body(descriptor: Int32, offset: Int64, length: Int64) -> OpaquePointer? {
        if sendsFromFile, length > 0 {
            if let response = MHD_create_response_from_fd_at_offset64(UInt64(length), descriptor, UInt64(offset)) {
                return response
            }
            close(descriptor)
            return nil
        }
        defer { close(descriptor) }
        return MappedFileBody.response(descriptor: descriptor, offset: offset, length: length)
    }

    private static func sizeOnDisk(_ path: String) -> Int64? {
        var status = stat()
        return stat(path, &status) == 0 ? Int64(status.st_size) : nil
    }

    /// Resolves an origin-form target (`/path`, with the `Host` header) or an absolute-form one
    /// (`http://host/path`, as a proxy receives it; its authority wins over `Host`, RFC 9112 §3.2.2).
    private func resolve(_ connection: OpaquePointer, target: UnsafePointer<CChar>) -> Resource? {
        withEachRequestURL(connection, target: target) { store.resolve(utf8: $0) }
    }

    /// Whether the request names a package folder without its final slash (`PackageStore.redirect`).
    private func isFolderWithoutSlash(_ connection: OpaquePointer, target: UnsafePointer<CChar>) -> Bool {
        withEachRequestURL(connection, target: target) { store.isFolderWithoutSlash(utf8: $0) ? true : nil } ?? false
    }

    /// `body`'s first answer for the request's URL: as the request names it, then, when its `Host`
    /// carries the server's own port (`curl --resolve m.example.com:8443:127.0.0.1
    /// https://m.example.com:8443/`), with that port dropped: the client means the route's host, and
    /// only reached it through the port the server listens on.
    private func withEachRequestURL<Result>(
        _ connection: OpaquePointer, target: UnsafePointer<CChar>, _ body: (UnsafeBufferPointer<UInt8>) -> Result?
    ) -> Result? {
        if let answer = withRequestURL(connection, target: target, body) { return answer }
        return withRequestURL(connection, target: target, droppingOwnPort: true, body)
    }

    /// The absolute URL a request stands for, as UTF-8 in a temporary buffer: the target itself when
    /// absolute, else `http://` (`https://` behind TLS) + `Host` + target, or `--origin` + target when `Host` is the server's
    /// own address. Nil without a `Host` (HTTP/1.0).
    /// `droppingOwnPort`: the `Host` without its port when that is the server's own one; nil when it is
    /// not (the URL as given was tried already).
    private func withRequestURL<Result>(
        _ connection: OpaquePointer, target: UnsafePointer<CChar>, droppingOwnPort: Bool = false,
        _ body: (UnsafeBufferPointer<UInt8>) -> Result?
    ) -> Result? {
        let targetLength = strlen(target)
        return target.withMemoryRebound(to: UInt8.self, capacity: targetLength) { target in
            if target[0] != UInt8(ascii: "/") {
                return droppingOwnPort ? nil : body(UnsafeBufferPointer(start: target, count: targetLength))
            }
            guard let host = MHD_lookup_connection_value(connection, .HEADER_KIND, "Host") else { return nil }
            var hostLength = strlen(host)
            return host.withMemoryRebound(to: UInt8.self, capacity: hostLength) { host in
                let hostBytes = UnsafeBufferPointer(start: host, count: hostLength)
                if droppingOwnPort {
                    guard !isOwnAddress(hostBytes), let colon = ownPortSeparator(hostBytes) else { return nil }
                    hostLength = colon
                } else if let origin, isOwnAddress(hostBytes) {
                    return origin.prefix.withUnsafeBufferPointer { prefix in
                        Self.joined(prefix, UnsafeBufferPointer(start: target, count: targetLength), body)
                    }
                }
                let scheme = scheme
                return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: scheme.utf8CodeUnitCount + hostLength) { buffer in
                    let base = buffer.baseAddress!
                    base.initialize(from: scheme.utf8Start, count: scheme.utf8CodeUnitCount)
                    (base + scheme.utf8CodeUnitCount).initialize(from: host, count: hostLength)
                    return Self.joined(
                        UnsafeBufferPointer(start: base, count: scheme.utf8CodeUnitCount + hostLength),
                        UnsafeBufferPointer(start: target, count: targetLength), body)
                }
            }
        }
    }

    private static func joined<Result>(
        _ first: UnsafeBufferPointer<UInt8>, _ second: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> Result?
    ) -> Result? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: first.count + second.count) { buffer in
            let base = buffer.baseAddress!
            if let start = first.baseAddress { base.initialize(from: start, count: first.count) }
            if let start = second.baseAddress { (base + first.count).initialize(from: start, count: second.count) }
            return body(UnsafeBufferPointer(start: base, count: first.count + second.count))
        }
    }

    /// Where the `:PORT` of `host` starts when PORT is the server's own, else nil.
    private func ownPortSeparator(_ host: UnsafeBufferPointer<UInt8>) -> Int? {
        guard let colon = host.lastIndex(of: UInt8(ascii: ":")), colon + 1 < host.count,
            host[(colon + 1)...].allSatisfy({ (0x30...0x39).contains($0) }),
            let port = UInt16(String(decoding: host[(colon + 1)...], as: UTF8.self)),
            port == ownPort.load(ordering: .acquiring)
        else { return nil }
        return colon
    }

    /// `127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT` or the listening host with the bound port.
    private func isOwnAddress(_ host: UnsafeBufferPointer<UInt8>) -> Bool {
        let text = String(decoding: host, as: UTF8.self).lowercased()
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]),
            port == ownPort.load(ordering: .acquiring)
        else { return false }
        let name = text[..<colon]
        return name == "127.0.0.1" || name == "localhost" || name == "[::1]" || name == ownHost || name == "[\(ownHost)]"
    }

    /// The "no package answers" path: a 404 that says why. A request whose URL a route of the active
    /// set covers names that package and the file it lacks; any other says no package answers it.
    /// (The one place a request that no package answers ends: a fallback for such URLs hooks in here.)
    private func answerMiss(_ connection: OpaquePointer, target: UnsafePointer<CChar>) -> MHD_Result {
        guard let url = withRequestURL(connection, target: target, { String(decoding: $0, as: UTF8.self) }) else {
            return MHD_queue_response(connection, UInt32(MHD_HTTP_NOT_FOUND), notFound)
        }
        let text: String
        if let (package, path) = store.missingFile(for: url) {
            text =
                "not found: package \(package.id) \(package.version) (active) has no file \(path.isEmpty ? "/" : path) for \(url)\n"
        } else {
            text = "not found: no active package answers \(url)\n"
        }
        let response = Self.textResponse(text)
        defer { MHD_destroy_response(response) }
        return MHD_queue_response(connection, UInt32(MHD_HTTP_NOT_FOUND), response)
    }

    /// `301` to the request target with a `/` added to its path (query kept), as nginx answers a
    /// folder named without its slash. The `Location` is the target itself, relative for an
    /// origin-form request, so it holds whatever host and port the client used.
    private func answerFolderRedirect(_ connection: OpaquePointer, target: UnsafePointer<CChar>) -> MHD_Result {
        let location = String(cString: target) + "/" + (recordedTarget(connection)?.currentQuery.map { "?" + $0 } ?? "")
        let response = Self.textResponse("moved permanently: \(location)\n")
        defer { MHD_destroy_response(response) }
        MHD_add_response_header(response, "Location", location)
        return MHD_queue_response(connection, UInt32(MHD_HTTP_MOVED_PERMANENTLY), response)
    }

    private func answerBadRequest(_ connection: OpaquePointer, _ problem: String) -> MHD_Result {
        let response = Self.textResponse("bad request: \(problem)\n")
        defer { MHD_destroy_response(response) }
        MHD_add_response_header(response, "Connection", "close")
        return MHD_queue_response(connection, UInt32(MHD_HTTP_BAD_REQUEST), response)
    }

    private func header(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
    }
}

/// MHD's access handler. A plain function in a file other than main.swift: MHD calls it from its own
/// threads, and code isolated to the main actor would trap there.
func handleRequest(
    context: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
    uploadSize: UnsafeMutablePointer<Int>?, requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let context, let connection, let url, let method, let uploadSize, let requestContext else { return .NO }
    let handler = Unmanaged<RequestHandler>.fromOpaque(context).takeUnretainedValue()
    // MHD calls once when the headers are in, then once per chunk of body, then once more with none
    // left. A response queued at the first call makes MHD drop the body and close the connection,
    // which costs keep-alive — even for a GET that announces no body (checked with libmicrohttpd
    // 0.9.75: it marks the connection read-closed) — so the first call only marks the request, body
    // bytes are discarded (GET and HEAD have none worth reading), and the answer goes out at the last
    // call.
    if requestContext.pointee == nil {
        headersArrived(connection)
        if let runtime = handler.runtime {
            // A connection resumed after waiting on the runtime cache, or a method passed through.
            if let answered = runtime.resumed(connection) { return answered }
            if let exchange = runtime.beginPassThrough(connection, target: url, method: method, version: version) {
                requestContext.pointee = Unmanaged.passRetained(exchange).toOpaque()
                return .YES
            }
        }
        requestContext.pointee = context
        return .YES
    }
    if let pending = requestContext.pointee, pending != context, let runtime = handler.runtime {
        let exchange = Unmanaged<RuntimeExchange>.fromOpaque(pending)
        let (result, done) = runtime.step(exchange.takeUnretainedValue(), connection, uploadData: uploadData, uploadSize: uploadSize)
        if done {
            requestContext.pointee = nil
            exchange.release()
        }
        return result
    }
    if uploadSize.pointee != 0 {
        uploadSize.pointee = 0
        return .YES
    }
    requestContext.pointee = nil
    return handler.handle(connection, target: url, method: method, version: version)
}
