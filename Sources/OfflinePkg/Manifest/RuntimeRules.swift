import FoundationEssentials

/// The manifest's optional `runtime` object (docs/protocol.md#the-runtime-object): how URLs that no package answers are cached.
package struct RuntimeConfiguration: Sendable, Equatable {
    package var rules: [RuntimeRule]
    package var limits: RuntimeLimits

    package init(rules: [RuntimeRule], limits: RuntimeLimits = .init()) {
        self.rules = rules
        self.limits = limits
    }

    /// The rule whose prefix is the longest one `url` starts with, or nil. Compared as lookups compare
    /// routes (docs/protocol.md#lookups): scheme and host case-insensitively, default ports dropped, `http` and `https`
    /// alike, the path decoded; the query is not part of the match.
    package func rule(for url: String) -> RuntimeRule? {
        guard let key = LookupURL.key(url) else { return nil }
        var best: RuntimeRule?
        var bestLength = -1
        for rule in rules {
            guard let prefix = LookupURL.key(rule.prefix), prefix.utf8.count > bestLength,
                key.utf8.starts(with: prefix.utf8)
            else { continue }
            best = rule
            bestLength = prefix.utf8.count
        }
        return best
    }
}

/// What happens to a request whose URL starts with `prefix`.
package struct RuntimeRule: Sendable, Equatable {
    package var prefix: String
    package var strategy: RuntimeStrategy
    /// Seconds a stored answer stays fresh: the update interval of the original caches.
    package var maxAge: Int
    /// `network-first`: seconds to wait for the network before answering from the cache.
    package var timeout: Double
    /// Whether answers to requests that carry a credential (`Authorization`, `Cookie`) or that are
    /// marked `Cache-Control: private` are stored, each under a hash of the request's credential
    /// (`"credentials": "separate"`), or never (the default), as a shared cache must (docs/protocol.md#neighbours-on-the-device).
    package var separatesCredentials: Bool

    package static let defaultMaxAge = 3600
    package static let defaultTimeout = 10.0

    package init(
        prefix: String, strategy: RuntimeStrategy, maxAge: Int = RuntimeRule.defaultMaxAge,
        timeout: Double = RuntimeRule.defaultTimeout, separatesCredentials: Bool = false
    ) {
        self.prefix = prefix
        self.strategy = strategy
        self.maxAge = maxAge
        self.timeout = timeout
        self.separatesCredentials = separatesCredentials
    }
}

package enum RuntimeStrategy: String, Sendable, Equatable, CaseIterable, Codable {
    /// The stored answer while it is younger than `maxAge`; the network when absent or older.
    case cacheFirst = "cache-first"
    /// The network; the stored answer when the network fails or takes longer than `timeout`.
    case networkFirst = "network-first"
    /// The stored answer at once, refreshed in the background when older than `maxAge`.
    case staleWhileRevalidate = "stale-while-revalidate"
    /// Always the network; nothing stored.
    case networkOnly = "network-only"
    /// Only what is stored; a miss is a 504.
    case cacheOnly = "cache-only"
}

/// Bounds of the runtime cache. The defaults are the original caches' (`NSURLCache` with 4 MB memory
/// and 20 MB disk capacity).
package struct RuntimeLimits: Sendable, Equatable {
    /// Bytes of bodies kept in memory (the hot set).
    package var memory: Int
    /// Bytes of bodies kept on disk.
    package var disk: Int
    /// Stored answers at most.
    package var entries: Int

    package init(memory: Int = 4 << 20, disk: Int = 20 << 20, entries: Int = 10_000) {
        self.memory = memory
        self.disk = disk
        self.entries = entries
    }
}

extension RuntimeConfiguration {
    /// Reads and validates the `runtime` value of a parsed JSON document (the manifest's, or a rules file
    /// `publish --runtime` reads); `source` and `field` name it in errors, as every other manifest error does.
    package init(json value: JSONValue, source: String, field: String = "runtime") throws {
        func fail(_ at: String, _ reason: String) -> OfflinePkgError {
            .invalidManifest(source: source, field: at, reason: reason)
        }
        guard let object = value.object else { throw fail(field, "expected an object") }
        guard let list = object["rules"]?.array else { throw fail("\(field).rules", "expected a list") }
        var rules = [RuntimeRule]()
        var seen = [String: Int]()
        for (index, item) in list.enumerated() {
            let at = "\(field).rules[\(index)]"
            guard let rule = item.object else { throw fail(at, "expected an object") }
            guard let prefix = rule["prefix"]?.string else { throw fail("\(at).prefix", "missing or not a string") }
            guard let key = LookupURL.key(prefix), prefix.hasSuffix("/") else {
                throw fail("\(at).prefix", "\"\(prefix)\" is not an absolute http or https URL prefix ending in /")
            }
            // docs/protocol.md#neighbours-on-the-device: a page must not make the device fetch its own or its network's services.
            let authority = key[..<(key.firstIndex(of: "/") ?? key.endIndex)]
            let host =
                authority.hasPrefix("[")
                ? authority[...(authority.firstIndex(of: "]") ?? authority.startIndex)] : authority.prefix { $0 != ":" }
            if let address = PrivateAddress.literal(String(host)) {
                throw fail(
                    "\(at).prefix",
                    "\"\(prefix)\" names \(address), a loopback, link-local or private address; a device reaches a name only (serve --resolve pins one)")
            }
            if let other = seen[key] { throw fail("\(at).prefix", "\(prefix) is already the prefix of rules[\(other)]") }
            seen[key] = index
            guard let name = rule["strategy"]?.string else { throw fail("\(at).strategy", "missing or not a string") }
            guard let strategy = RuntimeStrategy(rawValue: name) else {
                throw fail(
                    "\(at).strategy",
                    "\"\(name)\" is not one of \(RuntimeStrategy.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let maxAge = try JSONNumbers.integer(rule["maxAge"], "\(at).maxAge", in: 0...(10 * 365 * 86_400), fail)
            let timeout = try JSONNumbers.seconds(rule["timeout"], "\(at).timeout", fail)
            var separate = false
            if let value = rule["credentials"], !value.isNull {
                guard let mode = value.string, mode == "separate" || mode == "none" else {
                    throw fail("\(at).credentials", "expected \"separate\" or \"none\", got \(value.string.map { "\"\($0)\"" } ?? "another kind of value")")
                }
                separate = mode == "separate"
            }
            rules.append(
                RuntimeRule(
                    prefix: prefix, strategy: strategy, maxAge: maxAge ?? RuntimeRule.defaultMaxAge,
                    timeout: timeout ?? RuntimeRule.defaultTimeout, separatesCredentials: separate))
        }
        var limits = RuntimeLimits()
        if let value = object["limits"], !value.isNull {
            guard let limitObject = value.object else { throw fail("\(field).limits", "expected an object") }
            let at = "\(field).limits"
            if let memory = try JSONNumbers.integer(limitObject["memory"], "\(at).memory", in: 0...(1 << 40), fail) {
                limits.memory = memory
            }
            if let disk = try JSONNumbers.integer(limitObject["disk"], "\(at).disk", in: 0...(1 << 44), fail) {
                limits.disk = disk
            }
            if let entries = try JSONNumbers.integer(limitObject["entries"], "\(at).entries", in: 1...10_000_000, fail) {
                limits.entries = entries
            }
        }
        self.init(rules: rules, limits: limits)
    }

    /// The object as a manifest writes it (`publish --runtime`).
    package var jsonObject: [String: Any] {
        [
            "rules": rules.map { rule -> [String: Any] in
                var object: [String: Any] = ["prefix": rule.prefix, "strategy": rule.strategy.rawValue, "maxAge": rule.maxAge]
                if rule.strategy == .networkFirst { object["timeout"] = rule.timeout }
                if rule.separatesCredentials { object["credentials"] = "separate" }
                return object
            },
            "limits": ["memory": limits.memory, "disk": limits.disk, "entries": limits.entries],
        ]
    }
}

/// The numbers of the `runtime` object: a JSON number (not a boolean), its value as a `Double`, and the
/// number as written for messages.
private enum JSONNumbers {
    static func number(
        _ value: JSONValue?, _ field: String, _ fail: (String, String) -> OfflinePkgError
    ) throws -> (value: Double, literal: String)? {
        guard let value, !value.isNull else { return nil }
        guard let (literal, isInteger) = value.number else {
            throw fail(field, value.boolean != nil ? "expected a number, got a boolean" : "expected a number")
        }
        if isInteger {
            guard let integer = Int(literal) else { throw fail(field, "expected a number, got one too large for 64 bits") }
            return (Double(integer), literal)
        }
        guard let double = Double(literal), double.isFinite else {
            throw fail(field, "expected a number, got one too large for 64 bits")
        }
        return (double, literal)
    }

    static func integer(
        _ value: JSONValue?, _ field: String, in range: ClosedRange<Int>, _ fail: (String, String) -> OfflinePkgError
    ) throws -> Int? {
        guard let (number, literal) = try number(value, field, fail) else { return nil }
        guard let integer = Int(exactly: number), range.contains(integer) else {
            throw fail(field, "expected an integer from \(range.lowerBound) to \(range.upperBound), got \(literal)")
        }
        return integer
    }

    static func seconds(_ value: JSONValue?, _ field: String, _ fail: (String, String) -> OfflinePkgError) throws -> Double? {
        guard let (seconds, literal) = try number(value, field, fail) else { return nil }
        guard seconds > 0, seconds <= 600 else { throw fail(field, "expected seconds above 0 and at most 600, got \(literal)") }
        return seconds
    }
}
