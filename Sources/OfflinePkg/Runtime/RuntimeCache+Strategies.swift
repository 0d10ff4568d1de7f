import FoundationEssentials

extension RuntimeCache {
    /// The answer when it needs no wait on the network (a fresh or usable stored copy, offline mode);
    /// nil when the strategy must go to the network. Lets a server answer hits on its own thread.
    package func answerWithoutWaiting(_ request: RuntimeRequest, rule: RuntimeRule) -> RuntimeAnswer? {
        guard request.method == "GET" || request.method == "HEAD" else {
            return options.offline ? gatewayTimeout("offlinepkg; detail=offline", "offline: \(request.method) not sent") : nil
        }
        let upstream = Self.upstreamURL(request.url, rule: rule)
        let now = world.clock.now()
        let stored = store.lookup(url: upstream, request: request.fields)
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
            let refreshing = refreshInBackground(request, upstream: upstream, stored: stored)
            return hit(stored, rule: rule, now: now, detail: refreshing ? "revalidating" : "refresh-deferred")
        case .networkFirst, .networkOnly:
            return nil
        }
    }

    /// Answers `request` per `rule` (docs/protocol.md#the-runtime-cache). Never throws: an unreachable network with nothing
    /// stored is a 504, as a gateway would answer.
    package func answer(_ request: RuntimeRequest, rule: RuntimeRule) async -> RuntimeAnswer {
        if let immediate = answerWithoutWaiting(request, rule: rule) { return immediate }
        let upstream = Self.upstreamURL(request.url, rule: rule)
        guard request.method == "GET" || request.method == "HEAD" else {
            statistics.count { $0.passedThrough += 1 }
            return await fromNetwork(
                request, upstream: upstream, stored: nil, storing: false, cacheStatus: "offlinepkg; fwd=method")
        }
        let now = world.clock.now()
        let stored = store.lookup(url: upstream, request: request.fields)
        switch rule.strategy {
        case .cacheFirst, .staleWhileRevalidate, .cacheOnly:
            return await fromNetwork(request, upstream: upstream, stored: stored, storing: true, rule: rule, now: now)
        case .networkFirst:
            let hadVariants = store.hasVariants(url: upstream)
            let outcome = await result(
                of: { try await self.sharedFetch(request, upstream: upstream, stored: stored, storing: true) },
                within: rule.timeout)
            switch outcome {
            case .success(let fetched)? where !(fetched.status >= 500 && stored != nil):
                return answer(fetched, stored: stored, rule: rule, now: now, hadVariants: hadVariants)
            case .success(let fetched)?:
                discard(fetched)
                statistics.count { $0.networkErrors += 1 }
                return hit(stored!, rule: rule, now: now, detail: "upstream-\(fetched.status)")
            case .failure?:
                statistics.count { $0.networkErrors += 1 }
                guard let stored else {
                    return gatewayTimeout("offlinepkg; fwd=miss; detail=network-error", "\(upstream) cannot be reached")
                }
                return hit(stored, rule: rule, now: now, detail: "network-error")
            case nil:
                guard let stored else {
                    statistics.count { $0.networkErrors += 1 }
                    return gatewayTimeout(
                        "offlinepkg; fwd=miss; detail=timeout", "\(upstream) did not answer within \(rule.timeout) s")
                }
                return hit(stored, rule: rule, now: now, detail: "timeout")
            }
        case .networkOnly:
            return await fromNetwork(
                request, upstream: upstream, stored: nil, storing: false, cacheStatus: "offlinepkg; fwd=bypass")
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
    private func fromNetwork(
        _ request: RuntimeRequest, upstream: String, stored: StoredAnswer?, storing: Bool, rule: RuntimeRule, now: Date
    ) async -> RuntimeAnswer {
        let hadVariants = store.hasVariants(url: upstream)
        do {
            let fetched = try await sharedFetch(request, upstream: upstream, stored: stored, storing: storing)
            if fetched.status >= 500, let stored {
                discard(fetched)
                statistics.count { $0.networkErrors += 1 }
                return hit(stored, rule: rule, now: now, detail: "upstream-\(fetched.status)")
            }
            return answer(fetched, stored: stored, rule: rule, now: now, hadVariants: hadVariants)
        } catch {
            statistics.count { $0.networkErrors += 1 }
            guard let stored else {
                return gatewayTimeout("offlinepkg; fwd=miss; detail=network-error", "\(upstream) cannot be reached: \(error)")
            }
            return hit(stored, rule: rule, now: now, detail: "network-error")
        }
    }

    /// Goes to the network and passes the answer on as it came (nothing stored).
    private func fromNetwork(
        _ request: RuntimeRequest, upstream: String, stored: StoredAnswer?, storing: Bool, cacheStatus: String
    ) async -> RuntimeAnswer {
        do {
            let fetched = try await fetch(request, upstream: upstream, stored: nil, storing: false)
            statistics.count { $0.misses += 1 }
            guard case .transient(let status, let fields, let path, let length, _) = fetched else {
                return gatewayTimeout(cacheStatus, "unexpected answer")
            }
            return RuntimeAnswer(
                status: status, fields: fields, body: .transient(path: path, length: length),
                cacheStatus: cacheStatus + "; fwd-status=\(status)")
        } catch {
            statistics.count { $0.networkErrors += 1 }
            return gatewayTimeout(cacheStatus + "; detail=network-error", "\(upstream) cannot be reached: \(error)")
        }
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
        case .stored(let answer):
            statistics.count { $0.misses += 1 }
            return RuntimeAnswer(
                status: 200, fields: answer.head.fields, body: body(of: answer), cacheStatus: "offlinepkg; fwd=\(reason); stored")
        case .renewed(let answer):
            statistics.count { $0.revalidations += 1 }
            return RuntimeAnswer(
                status: 200, fields: answer.head.fields, body: body(of: answer),
                cacheStatus: "offlinepkg; fwd=\(reason); fwd-status=304")
        case .transient(let status, let fields, let path, let length, let refusal):
            statistics.count { $0.misses += 1 }
            return RuntimeAnswer(
                status: status, fields: fields, body: .transient(path: path, length: length),
                cacheStatus: "offlinepkg; fwd=\(reason); fwd-status=\(status); detail=\"not stored: \(refusal)\"")
        }
    }

    private func discard(_ outcome: FetchOutcome) {
        if case .transient(_, _, let path, _, _) = outcome { FileSystem.discardFile(path) }
    }

    private func gatewayTimeout(_ cacheStatus: String, _ reason: String) -> RuntimeAnswer {
        statistics.count { $0.gatewayTimeouts += 1 }
        return .gatewayTimeout(cacheStatus, reason: reason)
    }
}
