import FoundationEssentials
import Synchronization

/// What one upstream request came to.
enum FetchOutcome: Sendable {
    /// A 200 that is now the stored answer; `setCookies`: the answer's `Set-Cookie` fields, for the
    /// request that caused it alone (docs/protocol.md#neighbours-on-the-device).
    case stored(StoredAnswer, setCookies: [(name: String, value: String)])
    /// A 304 that renewed the stored answer.
    case renewed(StoredAnswer, setCookies: [(name: String, value: String)])
    /// An answer that is not stored (another status, `no-store`, `private`, a credential, too large, a
    /// strategy that stores nothing), its body streamed through from the transfer as it arrives;
    /// `refusal` says why it was not stored.
    case streamed(status: Int, fields: [(name: String, value: String)], body: RuntimeStream, refusal: String)

    var status: Int {
        switch self {
        case .stored, .renewed: 200
        case .streamed(let status, _, _, _): status
        }
    }

    /// The same outcome for a request that shared the transfer but did not cause it: no cookie.
    var shared: FetchOutcome {
        switch self {
        case .stored(let answer, _): .stored(answer, setCookies: [])
        case .renewed(let answer, _): .renewed(answer, setCookies: [])
        case .streamed: self
        }
    }

    /// Lets go of an outcome nobody answers with: a streamed body's transfer stops.
    func discard() {
        if case .streamed(_, _, let body, _) = self { body.cancel() }
    }
}

/// Every upstream transfer slot is taken and the request waited its turn in vain (a 503).
struct UpstreamBusy: Error {}

extension RuntimeCache {
    /// One upstream request, shared by every caller asking for the same URL and variant while it runs.
    /// The refresh goes on when a caller stops waiting (a network-first timeout): its answer is stored.
    func sharedFetch(_ request: RuntimeRequest, route: RuntimeRoute, stored: StoredAnswer?, storing: Bool) async throws
        -> FetchOutcome
    {
        // A refresh is shared per stored variant. A miss is shared by requests with the same fields: the
        // answer's Vary is not known yet, and a request for another variant must not get this one's.
        let key: String
        if let stored {
            key = stored.head.variant
        } else {
            key =
                ([route.upstream] + Self.forwardedFields(request.fields).map { "\($0.0.lowercased()): \($0.1)" }.sorted())
                .joined(separator: "\n") + (storing ? "" : "\nnot-stored")
        }
        let (task, leader) = inFlight.withLock { running -> (Task<FetchOutcome, Error>, Bool) in
            if let task = running[key] { return (task, false) }
            let task = Task {
                defer { _ = self.inFlight.withLock { $0.removeValue(forKey: key) } }
                return try await self.fetch(request, route: route, stored: stored, storing: storing)
            }
            running[key] = task
            return (task, true)
        }
        let outcome = try await task.value
        if leader { return outcome }
        // A streamed body is one reader's: a caller that joined fetches its own.
        if case .streamed = outcome { return try await fetch(request, route: route, stored: stored, storing: storing) }
        return outcome.shared
    }

    /// Starts a background refresh of a stale answer unless one runs for it already or the bound of
    /// background refreshes is reached. Returns whether one runs now. It sends what the stored answer
    /// is keyed by and nothing more of `request` (`refreshFields`).
    @discardableResult
    func refreshInBackground(_ request: RuntimeRequest, route: RuntimeRoute, stored: StoredAnswer) -> Bool {
        if inFlight.withLock({ $0[stored.head.variant] != nil }) { return true }
        guard backgroundRunning.add(1, ordering: .relaxed).newValue <= options.backgroundRefreshes else {
            backgroundRunning.subtract(1, ordering: .relaxed)
            return false
        }
        let refresh = RuntimeRequest(
            url: request.url, method: "GET", fields: Self.refreshFields(of: stored.head, request: request.fields))
        Task.detached {
            defer { self.backgroundRunning.subtract(1, ordering: .relaxed) }
            do {
                let outcome = try await self.sharedFetch(refresh, route: route, stored: stored, storing: true)
                if case .renewed = outcome { self.statistics.count { $0.revalidations += 1 } }
                outcome.discard()
            } catch {
                self.statistics.count { $0.networkErrors += 1 }
            }
        }
        return true
    }

    /// One upstream request through the download transport (TLS, no redirects followed, no private
    /// address, timeouts), within the bound of transfers at once. A GET is retried once after a
    /// connection error before any byte arrived; other methods never are.
    func fetch(_ request: RuntimeRequest, route: RuntimeRoute, stored: StoredAnswer?, storing: Bool) async throws
        -> FetchOutcome
    {
        let idempotent = request.method == "GET" || request.method == "HEAD"
        do {
            return try await fetchOnce(request, route: route, stored: stored, storing: storing)
        } catch OfflinePkgError.transfer(_, let failure) where failure.isRetryable && idempotent {
            return try await fetchOnce(request, route: route, stored: stored, storing: storing)
        }
    }

    private func fetchOnce(_ request: RuntimeRequest, route: RuntimeRoute, stored: StoredAnswer?, storing: Bool) async throws
        -> FetchOutcome
    {
        guard let url = URL(string: route.upstream) else {
            throw OfflinePkgError.transfer(url: route.upstream, failure: .invalidURL)
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
        transfer.followsRedirects = false
        transfer.refusesPrivateAddresses = !options.allowPrivateUpstream && !Self.isPinned(url, options.resolve)

        guard await slots.acquire() else { throw UpstreamBusy() }
        let receiver = UpstreamReceiver(
            cache: self, request: request, route: route, stored: stored,
            refusal: storing ? (isRead ? nil : "method \(request.method)") : "not stored by this rule")
        let transport = transport
        let slots = slots
        // The transfer outlives this call when its body is streamed: it holds its slot until it ends.
        Task.detached {
            defer { slots.release() }
            do {
                let head = try await transport.get(
                    transfer, onResponse: { try receiver.begin($0) }, onBody: { try receiver.write($0) })
                await receiver.finish(head)
            } catch {
                receiver.fail(error)
            }
        }
        return try await receiver.outcome()
    }

    /// Whether `url`'s host and port are pinned with `--resolve` (an explicit choice of address, which
    /// may be a private one: docs/protocol.md#neighbours-on-the-device).
    static func isPinned(_ url: URL, _ pins: [String]) -> Bool {
        guard let host = url.host?.lowercased() else { return false }
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        let bare = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        return pins.contains { pin in
            let parts = pin.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { return false }
            let pinned = parts[0].lowercased()
            return (pinned == host || pinned == bare || pinned == "[\(bare)]") && Int(parts[1]) == port
        }
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
            if !once.resume(outcome), case .success(let value) = outcome, let fetched = value as? FetchOutcome {
                // Nobody reads a body that came after the timeout.
                fetched.discard()
            }
        }
    }
}

/// A continuation resumed by whichever side comes first.
final class OnceContinuation<T: Sendable>: Sendable {
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
