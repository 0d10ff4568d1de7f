import FoundationEssentials

extension RuntimeCache {
    /// The answer when it needs no wait on the network (a fresh or usable stored copy, offline mode);
    /// nil when the strategy must go to the network. Lets a server answer hits on its own thread.
    package func answerWithoutWaiting(_ request: RuntimeRequest, route: RuntimeRoute) -> RuntimeAnswer? {
        guard request.method == "GET" || request.method == "HEAD" else {
            return options.offline ? gatewayTimeout("offlinepkg; detail=offline", "offline: \(request.method) not sent") : nil
        }
        let rule = route.rule
        let upstream = route.upstream
        // docs/protocol.md#neighbours-on-the-device: a request with a credential is answered from the store only by a rule that keeps
        // answers per credential, and then only with its own credential's.
        let credential = HTTPCachePolicy.credentialHash(request.fields)
        if credential != nil && !rule.separatesCredentials {
            return options.offline || rule.strategy == .cacheOnly
                ? gatewayTimeout(
                    "offlinepkg; fwd=bypass; detail=credential", "\(upstream) is not stored for requests with a credential")
                : nil
        }
        let now = world.clock.now()
        let stored = store.lookup(url: upstream, request: request.fields, credential: credential)
        if options.offline {
            guard let stored else {
                return gatewayTimeout("offlinepkg; fwd=miss; detail=offline", "offline: \(upstream) is not stored")
            }
            return hit(stored, rule: rule, now: now, detail: "offline")
        }
        switch rule.strategy {
        case .cacheOnly:
            guard let stored else {
                return gatewayTimeout("offlinepkg; fwd=miss; detail=cache-only", "\(upstream) is not stored")
            }
            return hit(stored, rule: rule, now: now)
        case .cacheFirst:
            guard let stored, stored.head.isFresh(maxAge: rule.maxAge, now: now) else { return nil }
            return hit(stored, rule: rule, now: now)
        case .staleWhileRevalidate:
            guard let stored else { return nil }
            if stored.head.isFresh(maxAge: rule.maxAge, now: now) { return hit(stored, rule: rule, now: now) }
            let refreshing = refreshInBackground(request, route: route, stored: stored)
            return hit(stored, rule: rule, now: now, detail: refreshing ? "revalidating" : "refresh-deferred")
        case .networkFirst, .networkOnly:
            return nil
        }
    }

    /// Answers `request` per its route's rule (docs/protocol.md#the-runtime-cache). Never throws: an unreachable network with
    /// nothing stored is a 504, as a gateway would answer; a private upstream a 502, no transfer slot a 503.
    package func answer(_ request: RuntimeRequest, route: RuntimeRoute) async -> RuntimeAnswer {
        if let immediate = answerWithoutWaiting(request, route: route) { return immediate }
        let rule = route.rule
        guard request.method == "GET" || request.method == "HEAD" else {
            statistics.count { $0.passedThrough += 1 }
            return await fromNetwork(request, route: route, cacheStatus: "offlinepkg; fwd=method")
        }
        let credential = HTTPCachePolicy.credentialHash(request.fields)
        if credential != nil && !rule.separatesCredentials {
            return await fromNetwork(request, route: route, cacheStatus: "offlinepkg; fwd=bypass; detail=credential")
        }
        let now = world.clock.now()
        let stored = store.lookup(url: route.upstream, request: request.fields, credential: credential)
        switch rule.strategy {
        case .cacheFirst, .staleWhileRevalidate, .cacheOnly:
            return await fromNetwork(request, route: route, stored: stored, now: now)
        case .networkFirst:
            let hadVariants = store.hasVariants(url: route.upstream)
            let outcome = await result(
                of: { try await self.sharedFetch(request, route: route, stored: stored, storing: true) }, within: rule.timeout)
            switch outcome {
            case .success(let fetched)? where !(fetched.status >= 500 && stored != nil):
                return answer(fetched, stored: stored, rule: rule, now: now, hadVariants: hadVariants)
            case .success(let fetched)?:
                fetched.discard()
                statistics.count { $0.networkErrors += 1 }
                return hit(stored!, rule: rule, now: now, detail: "upstream-\(fetched.status)")
            case .failure(let error)?:
                return failed(error, upstream: route.upstream, stored: stored, rule: rule, now: now)
            case nil:
                guard let stored else {
                    statistics.count { $0.networkErrors += 1 }
                    return gatewayTimeout(
                        "offlinepkg; fwd=miss; detail=timeout", "\(route.upstream) did not answer within \(rule.timeout) s")
                }
                return hit(stored, rule: rule, now: now, detail: "timeout")
            }
        case .networkOnly:
            return await fromNetwork(request, route: route, cacheStatus: "offlinepkg; fwd=bypass")
        }
    }

    /// A stored answer, with `Cache-Status` saying so (`ttl` goes negative once it is stale).
    private func hit(_ stored: StoredAnswer, rule: RuntimeRule, now: Date, detail: String? = nil) -> RuntimeAnswer {
        let ttl = Int((Double(rule.maxAge) - stored.head.age(now: now)).rounded(.down))
        let stale = !stored.head.isFresh(maxAge: rule.maxAge, now: now)
        statistics.count {
            $0.hits += 1
            if stale { $0.stale += 1 }
        }
        var cacheStatus = "offlinepkg; hit; ttl=\(stored.head.mustRevalidate ? min(ttl, 0) : ttl)"
        if let detail { cacheStatus += "; detail=\(detail)" }
        return RuntimeAnswer(
            status: stored.head.status, fields: stored.head.fields, body: body(of: stored), cacheStatus: cacheStatus)
    }

    private func body(of stored: StoredAnswer) -> RuntimeBody {
        if let data = stored.data { return .data(data) }
        return .stored(path: stored.bodyPath, length: stored.head.size)
    }

    /// Goes to the network for a storing strategy; a failure (or a 5xx) falls back to a stale stored copy.
    private func fromNetwork(_ request: RuntimeRequest, route: RuntimeRoute, stored: StoredAnswer?, now: Date) async
        -> RuntimeAnswer
    {
        let hadVariants = store.hasVariants(url: route.upstream)
        do {
            let fetched = try await sharedFetch(request, route: route, stored: stored, storing: true)
            if fetched.status >= 500, let stored {
                fetched.discard()
                statistics.count { $0.networkErrors += 1 }
                return hit(stored, rule: route.rule, now: now, detail: "upstream-\(fetched.status)")
            }
            return answer(fetched, stored: stored, rule: route.rule, now: now, hadVariants: hadVariants)
        } catch {
            return failed(error, upstream: route.upstream, stored: stored, rule: route.rule, now: now)
        }
    }

    /// Goes to the network and passes the answer on as it comes (nothing stored).
    private func fromNetwork(_ request: RuntimeRequest, route: RuntimeRoute, cacheStatus: String) async -> RuntimeAnswer {
        do {
            let fetched = try await fetch(request, route: route, stored: nil, storing: false)
            statistics.count { $0.misses += 1 }
            guard case .streamed(let status, let fields, let body, _) = fetched else {
                fetched.discard()
                return gatewayTimeout(cacheStatus, "unexpected answer")
            }
            return RuntimeAnswer(
                status: status, fields: fields, body: .streamed(body), cacheStatus: cacheStatus + "; fwd-status=\(status)")
        } catch {
            return failed(error, upstream: route.upstream, stored: nil, rule: route.rule, now: world.clock.now(), cacheStatus: cacheStatus)
        }
    }

    /// What a failed upstream request is answered with: the stored copy when there is one, else a 502
    /// for a private address, a 503 when no transfer slot came free, a 504 for the rest.
    private func failed(
        _ error: Error, upstream: String, stored: StoredAnswer?, rule: RuntimeRule, now: Date,
        cacheStatus: String = "offlinepkg; fwd=miss"
    ) -> RuntimeAnswer {
        if let stored {
            statistics.count { $0.networkErrors += 1 }
            return hit(stored, rule: rule, now: now, detail: "network-error")
        }
        if case OfflinePkgError.transfer(_, .privateAddress(let address)) = error {
            statistics.count { $0.refusedUpstreams += 1 }
            return .refusal(
                status: 502, cacheStatus: cacheStatus + "; detail=private-upstream",
                reason: "\(upstream) is not fetched: its host is at \(address), a loopback, link-local or private address")
        }
        if error is UpstreamBusy {
            statistics.count { $0.busy += 1 }
            return .refusal(
                status: 503, cacheStatus: cacheStatus + "; detail=busy",
                reason: "\(upstream) is not fetched now: every upstream transfer is taken; try again", retryAfter: 1)
        }
        statistics.count { $0.networkErrors += 1 }
        return gatewayTimeout(cacheStatus + "; detail=network-error", "\(upstream) cannot be reached: \(error)")
    }

    /// What the network said, as an answer; `Cache-Status` names why it was forwarded.
    /// `hadVariants`: another variant of the URL was stored before the request (`fwd=vary-miss`).
    private func answer(_ fetched: FetchOutcome, stored: StoredAnswer?, rule: RuntimeRule, now: Date, hadVariants: Bool)
        -> RuntimeAnswer
    {
        let reason: String
        if let stored {
            reason = stored.head.isFresh(maxAge: rule.maxAge, now: now) ? "request" : "stale"
        } else {
            reason = hadVariants ? "vary-miss" : "miss"
        }
        switch fetched {
        case .stored(let answer, let setCookies):
            statistics.count { $0.misses += 1 }
            return RuntimeAnswer(
                status: 200, fields: answer.head.fields + setCookies, body: body(of: answer),
                cacheStatus: "offlinepkg; fwd=\(reason); stored")
        case .renewed(let answer, let setCookies):
            statistics.count { $0.revalidations += 1 }
            return RuntimeAnswer(
                status: 200, fields: answer.head.fields + setCookies, body: body(of: answer),
                cacheStatus: "offlinepkg; fwd=\(reason); fwd-status=304")
        case .streamed(let status, let fields, let body, let refusal):
            statistics.count { $0.misses += 1 }
            return RuntimeAnswer(
                status: status, fields: fields, body: .streamed(body),
                cacheStatus: "offlinepkg; fwd=\(reason); fwd-status=\(status); detail=\"not stored: \(refusal)\"")
        }
    }

    private func gatewayTimeout(_ cacheStatus: String, _ reason: String) -> RuntimeAnswer {
        statistics.count { $0.gatewayTimeouts += 1 }
        return .gatewayTimeout(cacheStatus, reason: reason)
    }
}
