import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// docs/protocol.md#neighbours-on-the-device's rules for what the runtime cache sends upstream and keeps, one by one. (The same,
/// attacked through `serve`: `NeighbourAnswerTests`.)
@Suite struct UpstreamPolicyTests {
    static let rule = RuntimeRule(prefix: "https://api.example.com/v1/", strategy: .cacheFirst)

    @Test(arguments: [
        ("http://api.example.com/v1/x", "https://api.example.com/v1/x"),
        ("http://API.example.com:80/admin/%2e%2e/v1/./x?b=1&a=%20#frag", "https://api.example.com/v1/x?b=1&a=%20"),
        ("http://user:pass@api.example.com/v1/x", "https://api.example.com/v1/x"),
        ("http://api.example.com/v1/a%3Fb%23c%25d%20e", "https://api.example.com/v1/a%3Fb%23c%25d%20e"),
        ("http://api.example.com/v1//x/", "https://api.example.com/v1//x/"),
        ("http://api.example.com/v1/caf%C3%A9;v=1", "https://api.example.com/v1/caf%C3%A9;v=1"),
    ])
    func theUpstreamURLIsRebuiltFromWhatTheRuleMatched(request: String, upstream: String) {
        #expect(RuntimeCache.upstreamURL(request, rule: Self.rule) == upstream)
    }

    @Test func onlyFieldsAnUpstreamMayTrustGoUpstream() {
        let fields: [(name: String, value: String)] = [
            ("Host", "evil.test"), ("X-Forwarded-Host", "evil.test"), ("x-FORWARDED-for", "6.6.6.6"), ("Forwarded", "for=x"),
            ("Via", "1.1 x"), ("Proxy-Authorization", "Basic x"), ("X-Real-IP", "6.6.6.6"), ("X-Original-URL", "/admin"),
            ("X-HTTP-Method-Override", "DELETE"), ("Connection", "close, X-Keep"), ("X-Keep", "1"), ("TE", "trailers"),
            ("X-Forwarded-Host ", "spaced"), ("If-None-Match", "\"x\""), ("Range", "bytes=0-1"),
            ("Accept", "application/json"), ("Authorization", "Bearer a"), ("Cookie", "s=1"), ("X-Request-ID", "7"),
        ]
        let sent = RuntimeCache.forwardedFields(fields).map(\.0)
        #expect(sent == ["Accept", "Authorization", "Cookie", "X-Request-ID"], "\(sent)")
    }

    @Test func aStaleRefreshSendsWhatTheAnswerIsKeyedBy() {
        var head = RuntimeEntryHead(
            url: "https://api.example.com/v1/x", vary: ["accept-language"], varyValues: ["fr"], status: 200, headers: [],
            storedAt: 0, body: "", size: 0)
        let request: [(name: String, value: String)] = [
            ("Accept-Language", "de"), ("X-Probe", "attacker"), ("Authorization", "Bearer a"), ("Cookie", "s=1"),
        ]
        #expect(
            RuntimeCache.refreshFields(of: head, request: request).map { "\($0.name): \($0.value)" } == ["accept-language: fr"])
        head.credential = HTTPCachePolicy.credentialHash(request)
        #expect(
            RuntimeCache.refreshFields(of: head, request: request).map { "\($0.name): \($0.value)" }
                == ["accept-language: fr", "Authorization: Bearer a", "Cookie: s=1"])
    }

    @Test func credentialsKeyAndRefuseStorage() {
        let alice = HTTPCachePolicy.credentialHash([("Authorization", "Bearer alice")])
        #expect(alice != nil && alice == HTTPCachePolicy.credentialHash([("authorization", "Bearer alice"), ("Accept", "*/*")]))
        #expect(alice != HTTPCachePolicy.credentialHash([("Authorization", "Bearer alice"), ("Cookie", "a=1")]))
        #expect(
            HTTPCachePolicy.credentialHash([("Cookie", "a=1"), ("Cookie", "b=2")])
                != HTTPCachePolicy.credentialHash([("Cookie", "a=1")]))
        #expect(HTTPCachePolicy.credentialHash([("Accept", "*/*")]) == nil)
        let ok: [(name: String, value: String)] = [("Content-Type", "application/json")]
        #expect(
            HTTPCachePolicy.refusal(status: 200, fields: ok, requestFields: [("Cookie", "s=1")]) == "a credential in the request")
        #expect(HTTPCachePolicy.refusal(status: 200, fields: ok, requestFields: [("Cookie", "s=1")], separate: true) == nil)
        let privateAnswer: [(name: String, value: String)] = [("Cache-Control", "max-age=60, PRIVATE")]
        #expect(HTTPCachePolicy.refusal(status: 200, fields: privateAnswer, requestFields: []) == "private")
        #expect(HTTPCachePolicy.refusal(status: 302, fields: ok, requestFields: [], separate: true) == "status 302")
        #expect(
            HTTPCachePolicy.storable([("Set-Cookie", "s=1"), ("set-cookie2", "x"), ("ETag", "\"e\"")]).map(\.name) == ["ETag"])
        // An answer that varies on a credential keys by it without writing it into its head.
        let alicesValues = HTTPCachePolicy.varyValues(["accept", "cookie"], request: [("Cookie", "s=alice"), ("Accept", "*/*")])
        #expect(alicesValues[0] == "*/*" && !alicesValues[1].contains("alice") && !alicesValues[1].isEmpty)
        #expect(
            alicesValues != HTTPCachePolicy.varyValues(["accept", "cookie"], request: [("Cookie", "s=bob"), ("Accept", "*/*")]))
        #expect(HTTPCachePolicy.varyValues(["cookie"], request: []) == [""])
    }

    @Test func credentialsIsValidatedAndPublished() throws {
        let separate = try RuntimeRulesTests.parse([
            "rules": [["prefix": "https://api.example.com/", "strategy": "cache-first", "credentials": "separate"]]
        ])
        let rule = try #require(separate.runtime?.rules.first)
        #expect(rule.separatesCredentials)
        #expect(separate.runtime?.jsonObject["rules"].map { "\($0)" }?.contains("separate") == true)
        #expect(
            try RuntimeRulesTests.parse([
                "rules": [["prefix": "https://a.example.com/", "strategy": "cache-first", "credentials": "none"]]
            ])
            .runtime?.rules.first?.separatesCredentials == false)
        for value in ["shared", true, 1] as [Any] {
            #expect {
                _ = try RuntimeRulesTests.parse([
                    "rules": [["prefix": "https://a.example.com/", "strategy": "cache-first", "credentials": value]]
                ])
            } throws: { error in
                guard case OfflinePkgError.invalidManifest(_, let field, _) = error else { return false }
                return field == "runtime.rules[0].credentials"
            }
        }
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("127.1", true), ("0x7f.1", true), ("2130706433", true), ("0.0.0.0", true), ("10.0.0.1", true),
        ("100.64.0.1", true), ("100.128.0.1", false), ("169.254.169.254", true), ("172.16.0.1", true), ("172.32.0.1", false),
        ("192.168.0.1", true), ("8.8.8.8", false), ("[::1]", true), ("[::]", true), ("[fe80::1]", true), ("[fd12::1]", true),
        ("[fec0::1]", true), ("[::ffff:10.0.0.1]", true), ("[::ffff:8.8.8.8]", false), ("[2001:db8::1]", false),
        ("[64:ff9b::7f00:1]", true), ("[64:ff9b::a9fe:a9fe]", true), ("[64:ff9b::808:808]", false),
        ("api.example.com", false), ("localhost", false),
    ])
    func privateLiterals(host: String, refused: Bool) {
        #expect((PrivateAddress.literal(host) != nil) == refused, "\(host)")
    }

    /// A head stored before answers were kept per credential may hold one user's answer or a cookie:
    /// the store drops it when it opens.
    @Test func aHeadOfTheOlderFormatIsDroppedAtOpen() throws {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path)
        let store = try RuntimeStore(layout: layout, limits: RuntimeLimits())
        let temporary = try store.temporaryFile()
        try temporary.descriptor.writeAll(Array("{\"user\": \"alice\"}".utf8), path: temporary.path)
        temporary.descriptor.close()
        let head = RuntimeEntryHead(
            url: "https://api.example.com/v1/me", vary: [], varyValues: [], status: 200,
            headers: [["Set-Cookie", "s=alice"], ["Content-Type", "application/json"]], storedAt: 0, body: "", size: 17)
        let stored = try store.commit(temporary: temporary.path, head: head, data: nil)
        #expect(stored.head.fields.map(\.name) == ["Content-Type"], "no Set-Cookie is stored")
        #expect(try RuntimeStore(layout: layout, limits: RuntimeLimits()).usage.entries == 1)

        var old = stored.head
        old.format = nil
        try FileSystem.writeAtomically(Array(try JSONEncoder().encode(old)), to: layout.runtimeEntry(key: old.key))
        #expect(try RuntimeStore(layout: layout, limits: RuntimeLimits()).usage.entries == 0)
        #expect(FileSystem.contents(of: layout.runtimeBodies).isEmpty)
    }

    /// A page that asks one path with a new query string each time pushes out that path's older answers
    /// (an eighth of the store at most is theirs), never every other stored answer.
    @Test func aCacheBusterPushesOutOnlyItsOwnPathsAnswers() throws {
        let scratch = try TemporaryDirectory()
        let store = try RuntimeStore(layout: CacheLayout(root: scratch.path), limits: RuntimeLimits(entries: 16))
        func put(_ url: String) throws {
            let temporary = try store.temporaryFile()
            try temporary.descriptor.writeAll(Array("{}".utf8), path: temporary.path)
            temporary.descriptor.close()
            let head = RuntimeEntryHead(
                url: url, vary: [], varyValues: [], status: 200, headers: [["Content-Type", "application/json"]],
                storedAt: 0, body: "", size: 2)
            _ = try store.commit(temporary: temporary.path, head: head, data: nil)
        }
        let kept = (1...4).map { "https://api.example.com/v1/page\($0)" } + ["https://api.example.com/v1/items?page=2"]
        for url in kept { try put(url) }
        for n in 1...40 { try put("https://api.example.com/v1/items?r=\(n)") }
        for url in kept.dropLast() {
            #expect(store.lookup(url: url, request: []) != nil, "\(url) was pushed out")
        }
        #expect(store.lookup(url: "https://api.example.com/v1/items?r=40", request: []) != nil)
        #expect(store.lookup(url: kept.last!, request: []) == nil, "the oldest of the path's answers goes first")
        #expect(store.usage.entries == 4 + 2)
    }
}
