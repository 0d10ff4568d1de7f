import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A runtime-cache setup as a device has it: a real nginx as the upstream API (`api.runtime.test`,
/// pinned to it with `serve --resolve`), a package published with `publish --runtime` and synced into a
/// root, and `offlinepkg serve` as a process (so it can be killed with -9).
final class RuntimeCacheRig: @unchecked Sendable {
    // Used from one test at a time.
    let scratch: TemporaryDirectory
    let upstreamRoot: String
    let upstream: NginxServer
    let locations: String
    let limitRate: Int?
    var root: String { scratch.path("root") }
    private var version = 0
    private(set) var serve: ServeProcess?

    /// `files` go under the upstream's document root; `locations` is nginx config (see `NginxServer`).
    init(files: [String: String], locations: String = "", limitRate: Int? = nil) throws {
        scratch = try TemporaryDirectory(prefix: "offlinepkg-runtime")
        upstreamRoot = try scratch.makeDirectory("upstream")
        self.locations = locations
        self.limitRate = limitRate
        for (index, (path, text)) in files.sorted(by: { $0.key < $1.key }).enumerated() {
            try Self.write(text, to: upstreamRoot + "/" + path, age: Double(-index - 10))
        }
        upstream = try NginxServer(documentRoot: upstreamRoot, limitRate: limitRate, locations: locations)
        _ = try scratch.makeDirectory("site")
        _ = try scratch.write("<!doctype html><title>app</title>", to: "site/index.html")
    }

    deinit { serve?.kill() }

    /// `host:port` of the upstream, as requests and rules name it.
    var apiHost: String { "api.runtime.test:\(upstream.port)" }
    var apiPrefix: String { "http://\(apiHost)/v1/" }

    /// Rewrites an upstream file with a new mtime (nginx's ETag is mtime + size, so a rewrite within the
    /// same second still looks changed).
    func writeUpstream(_ path: String, _ text: String) throws {
        version += 1
        try Self.write(text, to: upstreamRoot + "/" + path, age: Double(version))
    }

    private static func write(_ text: String, to path: String, age: Double) throws {
        try writeFile(Data(text.utf8), to: path, modified: Date().addingTimeInterval(age))
    }

    /// Publishes the site with `rules` (the `runtime` object as JSON; nil: none named) and syncs it.
    func publishAndSync(rules: String?, site: String? = nil) async throws {
        var arguments = [
            "publish", site ?? scratch.path("site"), "--repo", scratch.path("repo"), "--id", "app", "--version",
            "v\(UInt64.random(in: 0...UInt64.max))", "--route", "http://app.runtime.test/", "--quiet",
        ]
        if let rules {
            let path = try scratch.write(rules, to: "rules-\(UUID().uuidString).json")
            arguments += ["--runtime", path]
        }
        try await InProcessCLI.run(arguments).checked("publish")
        try await InProcessCLI.run(["sync", scratch.path("repo/manifest.json"), "--root", root, "--quiet"]).checked("sync")
    }

    /// One rule on the API prefix, with `extra` JSON members (e.g. `"maxAge": 1`) and optional limits.
    func publishAndSync(strategy: String, extra: String = "", limits: String? = nil) async throws {
        let rule = "{\"prefix\": \"\(apiPrefix)\", \"strategy\": \"\(strategy)\"\(extra.isEmpty ? "" : ", " + extra)}"
        try await publishAndSync(rules: "{\"rules\": [\(rule)]\(limits.map { ", \"limits\": \($0)" } ?? "")}")
    }

    @discardableResult
    func startServe(offline: Bool = false, environment: [String: String] = [:]) throws -> ServeProcess {
        serve?.stop()
        var arguments = ["--resolve", "\(apiHost):127.0.0.1"]
        if offline { arguments.append("--offline") }
        let started = try ServeProcess(root: root, arguments, environment: environment)
        serve = started
        return started
    }

    /// A request through `serve` for `path` on the API host (`v1/...`).
    func get(_ path: String, _ curlArguments: [String] = []) throws -> HTTPReply {
        guard let serve else { throw TestSupportError("serve is not running") }
        let result = try Tool.curl(["-D", "-", "-H", "Host: \(apiHost)"] + curlArguments + [serve.url.absoluteString + path])
        return HTTPReply(result.stdout)
    }

    /// The upstream goes away (its port then refuses connections).
    func stopUpstream() { upstream.stop() }

    /// Requests nginx logged for `path` (with a leading slash).
    func upstreamRequests(_ path: String) -> [AccessLogEntry] { upstream.accessLog().filter { $0.uri == path } }

    /// Waits until nginx logged `count` requests for `path`, at most `timeout` seconds.
    @discardableResult
    func waitForUpstream(_ path: String, count: Int, timeout: Double = 5) -> [AccessLogEntry] {
        let deadline = Date().addingTimeInterval(timeout)
        var entries = upstreamRequests(path)
        while entries.count < count && Date() < deadline {
            usleep(20_000)
            entries = upstreamRequests(path)
        }
        return entries
    }

    /// `status --json`'s runtime object.
    func runtimeStatus() async throws -> [String: Any] {
        let result = try await InProcessCLI.run(["status", "--root", root, "--json"]).checked("status")
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        return object?["runtime"] as? [String: Any] ?? [:]
    }
}

extension HTTPReply {
    var cacheStatus: String { headers["cache-status"] ?? "" }
}
