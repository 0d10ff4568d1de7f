internal import CCurl
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Transfers that share connections: one libcurl multi handle, driven by one thread of its own while
/// any transfer runs. Connections stay in the handle's cache between transfers, so a sync pays one
/// handshake per origin, not one per request; where the origin offers HTTP/2 (ALPN, over TLS), every
/// transfer to it is a stream of one connection (`CURLPIPE_MULTIPLEX`, and `CURLOPT_PIPEWAIT` so that
/// transfers started together wait for that connection instead of opening their own), at most
/// `maxStreams` at once; over HTTP/1.1 at most `maxConnectionsPerHost` connections carry them, the
/// others waiting in libcurl's queue. A slow transfer never blocks Swift's cooperative pool: callers
/// wait on a continuation, and callbacks run on the session's thread.
///
/// The callbacks of every transfer run on that one thread, so they must not block (a transfer whose
/// request body is pulled from a client, as the runtime cache forwards, stays on `CurlTransport()`).
package final class CurlSession: @unchecked Sendable {
    /// How many transfers share what.
    package struct Limits: Sendable, Equatable {
        /// HTTP/1.1 connections to one host at once ("a few", as browsers open six).
        package var maxConnectionsPerHost = 4
        /// HTTP/2 streams at once on one connection; more transfers wait for a stream to end.
        package var maxStreams = 32

        package init(maxConnectionsPerHost: Int = 4, maxStreams: Int = 32) {
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.maxStreams = maxStreams
        }
    }

    private struct Waiting {
        var transfer: CurlTransfer
        var continuation: CheckedContinuation<TransferResponseHead, Error>
    }

    private struct Shared {
        var waiting: [Waiting] = []
        var driving = false
    }

    // The multi handle is touched only by the driving thread, except `curl_multi_wakeup`, which libcurl
    // allows from any thread; `shared` hands new transfers over.
    private let multi: UnsafeMutableRawPointer!
    private let shared = Mutex(Shared())
    private var running: [UnsafeMutableRawPointer: Waiting] = [:]

    package init(limits: Limits = .init()) {
        _ = CurlTransport.globalInit
        multi = curl_multi_init()
        ccurl_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, limits.maxConnectionsPerHost)
        ccurl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, limits.maxStreams)
    }

    deinit { if multi != nil { curl_multi_cleanup(multi) } }

    /// Runs `transfer` on the session and returns as it ends. Cancelling the task aborts the transfer
    /// at its next progress call (at least once a second).
    func perform(_ transfer: CurlTransfer) async throws -> TransferResponseHead {
        // curl_multi_init fails only when memory does; the transfer then runs alone, as in `perform()`.
        if multi == nil { return try await runBlocking { try transfer.perform().get() } }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let startDriver = shared.withLock { shared -> Bool in
                    shared.waiting.append(Waiting(transfer: transfer, continuation: continuation))
                    defer { shared.driving = true }
                    return !shared.driving
                }
                if startDriver { startThread() } else { curl_multi_wakeup(multi) }
            }
        } onCancel: {
            transfer.cancelled.store(true, ordering: .relaxed)
        }
    }

    private func startThread() {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        if pthread_create(&thread, nil, runCurlSession, context) == 0 {
            pthread_detach(thread)
            return
        }
        // No thread to be had (a process or thread limit): the transfers run one by one, in full, on
        // this thread, the caller's, until none waits.
        Unmanaged<CurlSession>.fromOpaque(context).release()
        while true {
            let waiting = shared.withLock { shared -> [Waiting] in
                defer { shared.waiting = [] }
                if shared.waiting.isEmpty { shared.driving = false }
                return shared.waiting
            }
            if waiting.isEmpty { return }
            for item in waiting { item.continuation.resume(with: item.transfer.perform()) }
        }
    }

    /// The driving loop: takes new transfers in, runs libcurl, ends finished transfers, and waits for
    /// sockets (or a wake-up) for at most a second at a time. Returns once nothing runs or waits.
    fileprivate func drive() {
        while true {
            let arrived = shared.withLock { shared -> [Waiting]? in
                if shared.waiting.isEmpty && running.isEmpty {
                    shared.driving = false
                    return nil
                }
                defer { shared.waiting = [] }
                return shared.waiting
            }
            guard let arrived else { return }
            for item in arrived { add(item) }
            var active: Int32 = 0
            curl_multi_perform(multi, &active)
            collectFinished()
            if !running.isEmpty { curl_multi_poll(multi, nil, 0, 1000, nil) }
        }
    }

    private func add(_ item: Waiting) {
        guard let handle = item.transfer.start() else {
            item.continuation.resume(
                throwing: OfflinePkgError.transfer(url: item.transfer.urlText, failure: .other(detail: "libcurl could not start"))
            )
            return
        }
        // Over TLS, wait for the first connection to an origin to say (ALPN) whether it multiplexes,
        // rather than open one connection per transfer started before it did. Cleartext is HTTP/1.1:
        // waiting there would hold each transfer until the one before it ends.
        if item.transfer.request.url.scheme?.lowercased() == "https" { ccurl_setopt_long(handle, CURLOPT_PIPEWAIT, 1) }
        guard curl_multi_add_handle(multi, handle) == CURLM_OK else {
            item.transfer.cleanUp()
            item.continuation.resume(
                throwing: OfflinePkgError.transfer(
                    url: item.transfer.urlText, failure: .other(detail: "libcurl refused the transfer")))
            return
        }
        running[handle] = item
    }

    private func collectFinished() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard ccurl_message_is_done(message) != 0, let handle = ccurl_message_handle(message),
                let item = running.removeValue(forKey: handle)
            else { continue }
            let result = item.transfer.finish(ccurl_message_result(message))
            curl_multi_remove_handle(multi, handle)
            item.transfer.cleanUp()
            item.continuation.resume(with: result)
        }
    }
}

// The session thread's body: a plain function, as pthread_create takes a C function pointer.
private func runCurlSession(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    Unmanaged<CurlSession>.fromOpaque(context!).takeRetainedValue().drive()
    return nil
}
