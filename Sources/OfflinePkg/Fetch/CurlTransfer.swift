internal import CCurl
import FoundationEssentials
import Synchronization

/// One transfer's state, shared with libcurl's callbacks through an unretained pointer.
final class CurlTransfer: @unchecked Sendable {
    // Only the transfer's own thread touches the mutable fields; `cancelled` is atomic.
    let request: TransferRequest
    let onResponse: @Sendable (TransferResponseHead) throws -> Void
    let onBody: @Sendable (UnsafeRawBufferPointer) throws -> Void
    let cancelled = Atomic<Bool>(false)
    var headers: [String: String] = [:]
    var fields: [(name: String, value: String)] = []
    var status = 0
    var announced = false
    var callbackError: Error?
    var handle: UnsafeMutableRawPointer?
    var lastReceived: Int64 = -1
    var lastProgress = ContinuousClock.now
    // The rate floor's current window: when it began and how many bytes had arrived by then.
    var windowStart = ContinuousClock.now
    var windowStartBytes: Int64 = 0
    /// Set when a slow-retrieval protection aborted the transfer.
    var cutOff: SlowRetrieval?
    /// The private address a connection was refused to (`TransferRequest.refusesPrivateAddresses`).
    var refusedAddress: String?

    init(
        request: TransferRequest, onResponse: @escaping @Sendable (TransferResponseHead) throws -> Void,
        onBody: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) {
        self.request = request
        self.onResponse = onResponse
        self.onBody = onBody
    }

    /// The URL as errors name it: never its userinfo (docs/protocol.md#neighbours-on-the-device), which
    /// would reach logs and `state.json`.
    var urlText: String { Userinfo.removed(from: request.url) }
    var isFile: Bool { request.url.isFileURL }

    /// One transfer on the calling thread, start to end (`curl_easy_perform`).
    func perform() -> Result<TransferResponseHead, Error> {
        guard let curl = start() else {
            return .failure(OfflinePkgError.transfer(url: urlText, failure: .other(detail: "libcurl could not start")))
        }
        defer { cleanUp() }
        return finish(curl_easy_perform(curl))
    }

    /// The header lists libcurl reads until the handle is cleaned up.
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var pinList: UnsafeMutablePointer<curl_slist>?

    /// Makes and configures the easy handle (`handle`); nil when libcurl cannot make one. The handle
    /// holds an unretained pointer to `self`: whoever runs it keeps the transfer alive until `cleanUp`.
    func start() -> UnsafeMutableRawPointer? {
        guard let curl = curl_easy_init() else { return nil }
        handle = curl
        for (name, value) in request.headers { headerList = curl_slist_append(headerList, "\(name): \(value)") }
        for pin in request.resolve { pinList = curl_slist_append(pinList, pin) }
        let list = headerList
        let pins = pinList
        if pins != nil { ccurl_setopt_slist(curl, CURLOPT_RESOLVE, pins) }
        if request.method == "HEAD" {
            ccurl_setopt_long(curl, CURLOPT_NOBODY, 1)
        } else if request.method != "GET" {
            // POST mode sends a body from the read callback; CUSTOMREQUEST names the real method.
            ccurl_setopt_long(curl, CURLOPT_POST, 1)
            ccurl_setopt_string(curl, CURLOPT_CUSTOMREQUEST, request.method)
            ccurl_setopt_off(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body == nil ? 0 : request.bodyLength ?? -1))
            if request.body != nil {
                ccurl_setopt_pointer(curl, CURLOPT_READDATA, Unmanaged.passUnretained(self).toOpaque())
                ccurl_setopt_data_callback(curl, CURLOPT_READFUNCTION) { data, size, count, context in
                    let transfer = Unmanaged<CurlTransfer>.fromOpaque(context!).takeUnretainedValue()
                    return transfer.request.body!(UnsafeMutableRawBufferPointer(start: data, count: size * count))
                }
            }
        }

        let context = Unmanaged.passUnretained(self).toOpaque()
        ccurl_setopt_string(curl, CURLOPT_URL, urlText)
        ccurl_setopt_slist(curl, CURLOPT_HTTPHEADER, list)
        ccurl_setopt_long(curl, CURLOPT_NOSIGNAL, 1)
        // HTTP/2 where TLS's ALPN offers it, HTTP/1.1 otherwise (libcurl's default, said here because a
        // `CurlSession` multiplexes on it).
        ccurl_setopt_long(curl, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        ccurl_setopt_long(curl, CURLOPT_FOLLOWLOCATION, request.followsRedirects ? 1 : 0)
        ccurl_setopt_long(curl, CURLOPT_MAXREDIRS, 8)
        if request.refusesPrivateAddresses {
            ccurl_setopt_pointer(curl, CURLOPT_OPENSOCKETDATA, context)
            ccurl_setopt_opensocket_callback(curl) { context, _, address in
                let transfer = Unmanaged<CurlTransfer>.fromOpaque(context!).takeUnretainedValue()
                return transfer.openSocket(address!)
            }
        }
        // https never redirects to http: a redirect may only keep or raise the scheme's protection. This
        // covers a transfer that starts on https; `header` covers an https hop later in the chain.
        let scheme = request.url.scheme?.lowercased() ?? ""
        ccurl_setopt_string(curl, CURLOPT_PROTOCOLS_STR, scheme == "file" ? "file" : "http,https")
        ccurl_setopt_string(curl, CURLOPT_REDIR_PROTOCOLS_STR, scheme == "https" ? "https" : "http,https")
        if let caBundle = request.caBundle { ccurl_setopt_string(curl, CURLOPT_CAINFO, caBundle) }
        ccurl_setopt_long(curl, CURLOPT_CONNECTTIMEOUT_MS, Int(request.connectTimeout * 1000))
        ccurl_setopt_string(curl, CURLOPT_USERAGENT, "offlinepkg/\(OfflinePkgVersion.current)")
        ccurl_setopt_string(curl, CURLOPT_ACCEPT_ENCODING, "identity")
        // A 512 KiB receive buffer instead of libcurl's 16 KiB: a fast link hands over 32 times fewer
        // chunks, so 32 times fewer recv calls, write calls to the download file and hash updates.
        ccurl_setopt_long(curl, CURLOPT_BUFFERSIZE, 512 << 10)
        ccurl_setopt_pointer(curl, CURLOPT_WRITEDATA, context)
        ccurl_setopt_data_callback(curl, CURLOPT_WRITEFUNCTION) { data, size, count, context in
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(context!).takeUnretainedValue()
            return transfer.receive(UnsafeRawBufferPointer(start: data, count: size * count)) ? size * count : 0
        }
        ccurl_setopt_pointer(curl, CURLOPT_HEADERDATA, context)
        ccurl_setopt_data_callback(curl, CURLOPT_HEADERFUNCTION) { data, size, count, context in
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(context!).takeUnretainedValue()
            return transfer.header(UnsafeRawBufferPointer(start: data, count: size * count)) ? size * count : 0
        }
        ccurl_setopt_long(curl, CURLOPT_NOPROGRESS, 0)
        ccurl_setopt_pointer(curl, CURLOPT_XFERINFODATA, context)
        // libcurl calls this at least once a second, also while no byte arrives: the stall clock.
        ccurl_setopt_xferinfo_callback(curl) { context, _, received, _, _ in
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(context!).takeUnretainedValue()
            return transfer.shouldAbort(received: Int64(received)) ? 1 : 0
        }

        return curl
    }

    /// Frees the handle and its lists; once, after the transfer ended.
    func cleanUp() {
        if let handle { curl_easy_cleanup(handle) }
        handle = nil
        curl_slist_free_all(headerList)
        curl_slist_free_all(pinList)
        headerList = nil
        pinList = nil
    }

    /// The transfer's result, once libcurl says it ended with `code`.
    func finish(_ code: CURLcode) -> Result<TransferResponseHead, Error> {
        if let callbackError { return .failure(callbackError) }
        var responseCode = 0
        if let curl = handle { ccurl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &responseCode) }
        if code != CURLE_OK { return .failure(error(for: code)) }
        let head = TransferResponseHead(
            status: isFile ? 200 : responseCode, headers: headers, fields: fields, httpVersion: httpVersion())
        if !announced {
            // An empty body: the response was never announced from the write callback.
            do { try onResponse(head) } catch { return .failure(error) }
        }
        return .success(head)
    }

    /// The slow-retrieval clocks, each deciding its own `SlowRetrieval` kind. A stall is no new byte for
    /// `stallTimeout` (libcurl's own low-speed check averages over a window, so a transfer that dies
    /// after a burst would run on past the timeout). The rate floor is checked over back-to-back windows
    /// of `minimumRateWindow`, so one byte every few seconds, which resets the stall clock each time,
    /// still ends when its window closes. The deadline bounds the whole fetch.
    func shouldAbort(received: Int64) -> Bool {
        if cancelled.load(ordering: .relaxed) { return true }
        let now = ContinuousClock.now
        let limits = request.limits
        if let deadline = request.deadline, deadline.hasPassed {
            cutOff = deadline.protection
            return true
        }
        if received != lastReceived {
            lastReceived = received
            lastProgress = now
        } else if now - lastProgress > .milliseconds(Int64(limits.stallTimeout * 1000)) {
            cutOff = .stalled(seconds: limits.stallTimeout)
            return true
        }
        if limits.minimumRate > 0, now - windowStart >= .milliseconds(Int64(limits.minimumRateWindow * 1000)) {
            let bytes = max(0, received) - windowStartBytes
            let elapsed = now - windowStart
            if Double(bytes) < Double(limits.minimumRate) * (elapsed / .seconds(1)) {
                cutOff = .belowMinimumRate(bytes: bytes, seconds: limits.minimumRateWindow, floor: limits.minimumRate)
                return true
            }
            windowStart = now
            windowStartBytes = max(0, received)
        }
        return false
    }

    /// Headers arrive line by line; a new status line (after a redirect or a 100) starts over. Returns
    /// false to abort the transfer: at the end of an https response that redirects to http.
    func header(_ line: UnsafeRawBufferPointer) -> Bool {
        let text = String(decoding: line, as: UTF8.self).trimmingWhitespaceAndNewlines()
        if text.hasPrefix("HTTP/") {
            headers = [:]
            fields = []
            let parts = text.split(separator: " ")
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            return true
        }
        if text.isEmpty { return !(request.followsRedirects && redirectsFromHTTPSToHTTP()) && announceFinalHead() }
        guard let colon = text.firstIndex(of: ":") else { return true }
        let name = text[..<colon].lowercased()
        let value = text[text.index(after: colon)...].trimmingWhitespace()
        headers[name] = value
        fields.append((String(text[..<colon]), value))
        return true
    }

    /// Hands the head of the final response to `onResponse` as soon as its headers end, before any
    /// byte of its body is read: a caller that refuses the answer (a whole file where ranges were asked)
    /// stops it there. Interim answers (1xx) and redirects that libcurl follows are not announced; a
    /// file URL has no status line and is announced with its first byte (`receive`). Returns false to
    /// abort the transfer.
    private func announceFinalHead() -> Bool {
        guard !announced, !isFile, status >= 200 else { return true }
        if request.followsRedirects && (300..<400).contains(status) && headers["location"] != nil { return true }
        announced = true
        do {
            try onResponse(TransferResponseHead(status: status, headers: headers, fields: fields, httpVersion: httpVersion()))
            return true
        } catch {
            callbackError = error
            return false
        }
    }

    /// The protocol of the response, from libcurl (`CURLINFO_HTTP_VERSION`); nil for a file URL.
    private func httpVersion() -> String? {
        guard !isFile, let handle else { return nil }
        var version = 0
        guard ccurl_getinfo_long(handle, CURLINFO_HTTP_VERSION, &version) == CURLE_OK else { return nil }
        switch version {
        case Int(CURL_HTTP_VERSION_1_0): return "http/1.0"
        case Int(CURL_HTTP_VERSION_1_1): return "http/1.1"
        case Int(CURL_HTTP_VERSION_2_0): return "h2"
        case Int(CURL_HTTP_VERSION_3): return "h3"
        default: return nil
        }
    }

    /// Whether the response whose headers just ended is an https hop redirecting to http, which is
    /// refused before libcurl follows it, however the chain began (http → https → http included).
    private func redirectsFromHTTPSToHTTP() -> Bool {
        guard (300..<400).contains(status), let location = headers["location"], let handle else { return false }
        var current: UnsafeMutablePointer<CChar>?
        guard ccurl_getinfo_string(handle, CURLINFO_EFFECTIVE_URL, &current) == CURLE_OK, let current,
            let hop = URL(string: String(cString: current)), hop.scheme?.lowercased() == "https",
            URL(string: location, relativeTo: hop)?.scheme?.lowercased() == "http"
        else { return false }
        callbackError = OfflinePkgError.transfer(url: urlText, failure: .disallowedRedirect(location: location))
        return true
    }

    /// libcurl's open-socket callback: a socket for `address`, or none (`CURL_SOCKET_BAD`) when it is a
    /// private address; libcurl then tries the name's next address, if it has one.
    func openSocket(_ address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
        if let refused = PrivateAddress.refused(ccurl_sockaddr_address(address)) {
            refusedAddress = refused
            return -1
        }
        let info = address.pointee
        return socket(info.family, info.socktype | Int32(SOCK_CLOEXEC.rawValue), info.protocol)
    }

    func receive(_ data: UnsafeRawBufferPointer) -> Bool {
        do {
            if !announced {
                announced = true
                try onResponse(
                    TransferResponseHead(
                        status: isFile ? 200 : status, headers: headers, fields: fields, httpVersion: httpVersion()))
            }
            try onBody(data)
            return true
        } catch {
            callbackError = error
            return false
        }
    }

    /// The one place a libcurl result becomes a `TransferFailure` (or the slow-retrieval protection that
    /// cut the transfer off).
    func error(for code: CURLcode) -> OfflinePkgError {
        if code == CURLE_ABORTED_BY_CALLBACK, let cutOff { return .slowRetrieval(url: urlText, protection: cutOff) }
        if code == CURLE_COULDNT_CONNECT, let refusedAddress {
            return .transfer(url: urlText, failure: .privateAddress(refusedAddress))
        }
        return .transfer(url: urlText, failure: Self.failure(for: code))
    }

    static func failure(for code: CURLcode) -> TransferFailure {
        let text = String(cString: curl_easy_strerror(code))
        switch code {
        case CURLE_OPERATION_TIMEDOUT: return .timedOut(detail: text)
        case CURLE_ABORTED_BY_CALLBACK: return .cancelled
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_PARTIAL_FILE,
            CURLE_GOT_NOTHING, CURLE_HTTP2, CURLE_HTTP2_STREAM:
            return .connection(detail: text)
        case CURLE_SSL_CONNECT_ERROR: return .tlsHandshake(detail: text)
        case CURLE_PEER_FAILED_VERIFICATION: return .certificateRefused(detail: text)
        case CURLE_UNSUPPORTED_PROTOCOL: return .disallowedRedirect(location: nil)
        case CURLE_FILE_COULDNT_READ_FILE: return .notFound(status: nil)
        default: return .other(detail: text)
        }
    }
}
