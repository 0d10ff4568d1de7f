internal import CCurl
import Foundation
import Synchronization

/// The transport for http, https and file URLs, on libcurl. Each transfer runs `curl_easy_perform` on
/// a thread of its own, so a slow server never ties up Swift's cooperative pool.
package struct CurlTransport: Transport {
    package init() { _ = CurlTransport.globalInit }

    // curl_global_init must run once, before any other thread uses libcurl; Swift runs this lazily, once.
    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    package func get(
        _ request: TransferRequest, onResponse: @escaping @Sendable (TransferResponseHead) throws -> Void,
        onBody: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws -> TransferResponseHead {
        let transfer = CurlTransfer(request: request, onResponse: onResponse, onBody: onBody)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let thread = Thread { continuation.resume(with: transfer.perform()) }
                thread.stackSize = 1 << 20
                thread.start()
            }
        } onCancel: {
            transfer.cancelled.store(true, ordering: .relaxed)
        }
    }
}

/// One transfer's state, shared with libcurl's callbacks through an unretained pointer.
private final class CurlTransfer: @unchecked Sendable {
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

    /// The URL as errors name it: never its userinfo (docs/protocol.md#neighbours-on-the-device), which would reach logs and `state.json`.
    var urlText: String { Userinfo.removed(from: request.url) }
    var isFile: Bool { request.url.isFileURL }

    func perform() -> Result<TransferResponseHead, Error> {
        guard let curl = curl_easy_init() else {
            return .failure(OfflinePkgError.transfer(url: urlText, failure: .other(detail: "libcurl could not start")))
        }
        handle = curl
        defer { curl_easy_cleanup(curl) }
        var list: UnsafeMutablePointer<curl_slist>?
        for (name, value) in request.headers { list = curl_slist_append(list, "\(name): \(value)") }
        defer { curl_slist_free_all(list) }
        var pins: UnsafeMutablePointer<curl_slist>?
        for pin in request.resolve { pins = curl_slist_append(pins, pin) }
        defer { curl_slist_free_all(pins) }
        if pins != nil { ccurl_setopt_slist(curl, CURLOPT_RESOLVE, pins) }
        let context = Unmanaged.passUnretained(self).toOpaque()
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

        ccurl_setopt_string(curl, CURLOPT_URL, urlText)
        ccurl_setopt_slist(curl, CURLOPT_HTTPHEADER, list)
        ccurl_setopt_long(curl, CURLOPT_NOSIGNAL, 1)
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

        let code = curl_easy_perform(curl)
        if let callbackError { return .failure(callbackError) }
        var responseCode = 0
        ccurl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &responseCode)
        if code != CURLE_OK { return .failure(error(for: code)) }
        let head = TransferResponseHead(status: isFile ? 200 : responseCode, headers: headers, fields: fields)
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
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.hasPrefix("HTTP/") {
            headers = [:]
            fields = []
            let parts = text.split(separator: " ")
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            return true
        }
        if text.isEmpty { return !(request.followsRedirects && redirectsFromHTTPSToHTTP()) }
        guard let colon = text.firstIndex(of: ":") else { return true }
        let name = text[..<colon].lowercased()
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        headers[name] = value
        fields.append((String(text[..<colon]), value))
        return true
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
                try onResponse(TransferResponseHead(status: isFile ? 200 : status, headers: headers, fields: fields))
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
