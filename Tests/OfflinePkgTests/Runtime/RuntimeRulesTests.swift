import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish
import OfflinePkgURLRequest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite("Runtime rules, store and library hook")
struct RuntimeRulesTests {
    static func parse(_ runtime: Any) throws -> Manifest {
        let object: [String: Any] = ["format": 1, "sequence": 1, "packages": [Any](), "runtime": runtime]
        return try Manifest(parsing: Array(try JSONSerialization.data(withJSONObject: object)), source: "m.json")
    }

    @Test func parsesTheSpecExampleWithDefaults() throws {
        let manifest = try Self.parse([
            "rules": [
                ["prefix": "https://api.example.com/v1/", "strategy": "stale-while-revalidate", "maxAge": 3600],
                ["prefix": "https://img.example.com/", "strategy": "cache-first", "maxAge": 604800],
                ["prefix": "https://api.example.com/v1/live/", "strategy": "network-first", "timeout": 3],
            ],
            "limits": ["memory": 4_194_304, "disk": 20_971_520, "entries": 10_000],
        ])
        let runtime = try #require(manifest.runtime)
        #expect(runtime.rules.count == 3)
        #expect(runtime.rules[2].timeout == 3 && runtime.rules[2].maxAge == 3600)
        #expect(runtime.limits == RuntimeLimits())
        // Longest prefix wins; scheme, host case and default port do not matter; the query is no part of it.
        #expect(runtime.rule(for: "https://api.example.com/v1/live/score?x=1")?.strategy == .networkFirst)
        #expect(runtime.rule(for: "http://API.example.com:80/v1/users")?.strategy == .staleWhileRevalidate)
        #expect(runtime.rule(for: "https://img.example.com/a.png")?.maxAge == 604800)
        #expect(runtime.rule(for: "https://api.example.com/v2/") == nil)
        #expect(try Self.parse(["rules": [Any]()]).runtime?.limits.disk == 20 << 20)
    }

    @Test(arguments: [
        (#"[{"prefix": "api.example.com/", "strategy": "cache-first"}]"#, "runtime.rules[0].prefix"),
        (#"[{"prefix": "https://api.example.com/v1", "strategy": "cache-first"}]"#, "runtime.rules[0].prefix"),
        (#"[{"prefix": "https://a.example.com/", "strategy": "fastest"}]"#, "runtime.rules[0].strategy"),
        (#"[{"prefix": "https://a.example.com/"}]"#, "runtime.rules[0].strategy"),
        (#"[{"prefix": "https://a.example.com/", "strategy": "cache-first", "maxAge": -1}]"#, "runtime.rules[0].maxAge"),
        (#"[{"prefix": "https://a.example.com/", "strategy": "cache-first", "maxAge": true}]"#, "runtime.rules[0].maxAge"),
        (#"[{"prefix": "https://a.example.com/", "strategy": "network-first", "timeout": 0}]"#, "runtime.rules[0].timeout"),
        (
            #"[{"prefix": "https://a.example.com/", "strategy": "cache-first"}, {"prefix": "https://A.example.com:443/", "strategy": "network-only"}]"#,
            "runtime.rules[1].prefix"
        ),
    ])
    func refusesABadRule(rules: String, field: String) throws {
        let value = try JSONSerialization.jsonObject(with: Data(rules.utf8))
        #expect {
            _ = try Self.parse(["rules": value])
        } throws: { error in
            guard case OfflinePkgError.invalidManifest(_, let got, _) = error else { return false }
            return got == field
        }
    }

    @Test func refusesBadLimitsAndShapes() throws {
        for (runtime, field) in [
            (["rules": [Any](), "limits": ["disk": "20MB"]], "runtime.limits.disk"),
            (["rules": [Any](), "limits": ["entries": 0]], "runtime.limits.entries"),
            (["rules": "all"], "runtime.rules"),
            ("cache everything", "runtime"),
        ] as [(Any, String)] {
            #expect {
                _ = try Self.parse(runtime)
            } throws: { error in
                guard case OfflinePkgError.invalidManifest(_, let got, let reason) = error else { return false }
                return got == field && !reason.isEmpty
            }
        }
        let message = "\(OfflinePkgError.invalidManifest(source: "m.json", field: "runtime.rules[0].strategy", reason: "x"))"
        #expect(message.contains("runtime.rules[0].strategy"))
    }

    @Test func lruListEvictsTheLeastRecentlyUsedAndReusesSlots() {
        var list = LRUList<String, Int>()
        for (index, key) in ["a", "b", "c"].enumerated() { list.set(key, index) }
        #expect(list.touch("a") == 0)
        #expect(list.keysNewestFirst == ["a", "c", "b"])
        #expect(list.removeOldest()?.key == "b")
        list.setOldest("z", 9)
        #expect(list.keysNewestFirst == ["a", "c", "z"])
        #expect(list.remove("c") == 2)
        list.set("d", 3)
        #expect(list.keysNewestFirst == ["d", "a", "z"] && list.count == 3)
        #expect(list.peek("z") == 9 && list.keysNewestFirst.last == "z")
    }

    @Test func publishSetsTheRuntimeObjectAndKeepsItAcrossLaterPublishes() throws {
        let scratch = try TemporaryDirectory()
        try writeSite(["index.html": "<p>one</p>"], to: scratch.path("site"))
        let publisher = Publisher(repository: URL(fileURLWithPath: scratch.path("repo")))
        var request = PublishRequest(site: scratch.path("site"), id: "app", version: "1", routes: ["https://app.example.com/"])
        request.runtime = RuntimeConfiguration(
            rules: [RuntimeRule(prefix: "https://api.example.com/", strategy: .networkFirst, timeout: 2)],
            limits: RuntimeLimits(entries: 50))
        _ = try publisher.publish(request)
        try writeSite(["index.html": "<p>two</p>"], to: scratch.path("site"))
        _ = try publisher.publish(
            PublishRequest(site: scratch.path("site"), id: "app", version: "2", routes: ["https://app.example.com/"]))
        let manifest = try Manifest(parsing: FileSystem.read(scratch.path("repo/manifest.json")), source: "manifest.json")
        #expect(manifest.sequence == 2)
        #expect(manifest.runtime == request.runtime)
    }

    /// The in-process URL hook: a rule's URL fetched once from nginx, then answered from the store,
    /// and with the `offline` option without the network at all.
    @Test func cachedResponseForAURLRequestAnswersFromTheStoreAndOffline() async throws {
        let scratch = try TemporaryDirectory()
        try writeSite(["v1/user.json": "{\"name\": \"ada\"}"], to: scratch.path("upstream"))
        let upstream = try NginxServer(documentRoot: scratch.path("upstream"))
        try writeSite(["index.html": "<p>app</p>"], to: scratch.path("site"))
        let host = "api.hook.test:\(upstream.port)"
        var request = PublishRequest(site: scratch.path("site"), id: "app", version: "1", routes: ["https://app.hook.test/"])
        request.runtime = RuntimeConfiguration(rules: [RuntimeRule(prefix: "http://\(host)/v1/", strategy: .cacheFirst)])
        _ = try Publisher(repository: URL(fileURLWithPath: scratch.path("repo"))).publish(request)

        var options = PackageStore.Options()
        options.runtime = RuntimeCache.Options(resolve: ["\(host):127.0.0.1"])
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: options)
        _ = try await Updater(store: store, manifestURL: URL(fileURLWithPath: scratch.path("repo/manifest.json"))).sync()

        let url = URL(string: "http://\(host)/v1/user.json")!
        let first = try #require(try await store.cachedResponse(for: URLRequest(url: url)))
        #expect(first.status == 200 && first.cacheStatus == "offlinepkg; fwd=miss; stored")
        #expect(try first.bodyData() == Data("{\"name\": \"ada\"}".utf8))
        #expect(first.header("Content-Type") == "application/json")
        let second = try #require(try await store.cachedResponse(for: URLRequest(url: url)))
        #expect(second.cacheStatus.hasPrefix("offlinepkg; hit"))
        #expect(upstream.requestCount(path: "/v1/user.json") == 1)
        // A package URL is the package's file; a URL outside packages and rules is nobody's.
        let page = try #require(try await store.cachedResponse(for: URLRequest(url: URL(string: "https://app.hook.test/")!)))
        #expect(try page.bodyData() == Data("<p>app</p>".utf8))
        #expect(try await store.cachedResponse(for: URLRequest(url: URL(string: "https://elsewhere.test/")!)) == nil)

        upstream.stop()
        var offlineOptions = PackageStore.Options()
        offlineOptions.runtime = RuntimeCache.Options(offline: true)
        let offline = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: offlineOptions)
        let stored = try #require(try await offline.cachedResponse(for: URLRequest(url: url)))
        #expect(try stored.bodyData() == Data("{\"name\": \"ada\"}".utf8) && stored.cacheStatus.contains("detail=offline"))
        let missing = try #require(
            try await offline.cachedResponse(for: URLRequest(url: URL(string: "http://\(host)/v1/other.json")!)))
        #expect(missing.status == 504)

        // verify checks each entry against its body; --repair drops a broken one.
        #expect(try offline.writer.verify().isEmpty)
        guard case .file(let bodyFile) = stored.body else { throw TestSupportError("expected a stored body file") }
        try Data("{}".utf8).write(to: bodyFile)
        let damage = try offline.writer.verify()
        #expect(damage.count == 1 && damage.first?.packageID == TreeDamage.runtimeCache)
        #expect(damage.first?.problem.contains("expected 15") == true, "\(damage)")
        #expect(try await TreeRepairer(root: offline.writer).repair(damage) == [TreeDamage.runtimeCache])
        #expect(try offline.writer.verify().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: bodyFile.path))
    }
}
