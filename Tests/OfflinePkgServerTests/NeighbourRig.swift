import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#neighbours-on-the-device as the world will meet it: `offlinepkg serve` running as the shell's unprivileged user
/// (`nobody`) on a root that user owns, a real nginx as the upstream API — it answers per
/// `Authorization`, sets cookies, redirects to a loopback and to an "any address" server, and logs
/// every header that matters — a second nginx standing for an internal service that nothing may
/// reach, and requests made as the shell's user, as root, or as a hostile second user (`opk-b`).
final class NeighbourRig: @unchecked Sendable {
    // Used from one test at a time.
    let scratch: TemporaryDirectory
    let upstream: NginxServer
    /// What no page may make the device fetch.
    let service: NginxServer
    private(set) var serve: ServeProcess?
    var root: String { scratch.path("root") }
    var apiHost: String { "api.neighbour.test:\(upstream.port)" }
    var internalHost: String { "internal.localhost:\(service.port)" }
    static let bigSize = 100 << 20
    static let slowSize = 3_000

    init() throws {
        scratch = try TemporaryDirectory(prefix: "offlinepkg-neighbour")
        // The users must pass through to the root and the binary (mkdtemp makes 0700).
        chmod(scratch.path, 0o755)
        try scratch.write("{\"items\": [1, 2, 3]}\n", to: "upstream/v1/data.json")
        try scratch.write(String(repeating: "s", count: Self.slowSize), to: "upstream/slow.bin")
        // 100 MiB that take no disk: a sparse file nginx sends like any other.
        let big = open(scratch.path("upstream/big.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        ftruncate(big, off_t(Self.bigSize))
        close(big)
        service = try NginxServer(
            documentRoot: try scratch.makeDirectory("internal"),
            locations: "location /internal { return 200 \"internal secret\\n\"; }")
        let cookie = "add_header Set-Cookie \"session=$request_id; Path=/\";"
        upstream = try NginxServer(
            documentRoot: scratch.path("upstream"),
            locations: """
                location /v1/data.json { }
                location /v1/me { default_type application/json; \(cookie) return 200 "{\\"user\\": \\"$http_authorization\\", \\"cookie\\": \\"$http_cookie\\"}\\n"; }
                location /v2/me { default_type application/json; \(cookie) return 200 "{\\"user\\": \\"$http_authorization\\", \\"cookie\\": \\"$http_cookie\\"}\\n"; }
                location /v1/private { add_header Cache-Control private; return 200 "private $request_id\\n"; }
                location /v1/cookie { \(cookie) return 200 "welcome\\n"; }
                location /v1/cookie-slow { \(cookie) limit_rate 1000; try_files /slow.bin =404; }
                location /v1/redirect-loopback { return 302 http://127.0.0.1:INTERNAL/internal; }
                location /v1/redirect-any { return 302 http://0.0.0.0:INTERNAL/internal; }
                location /v1/echo { return 200 "echo\\n"; }
                location /v1/submit { return 201 "accepted\\n"; }
                location /swr/ { return 200 "swr $request_id\\n"; }
                location /slow/ { limit_rate 1000; try_files /slow.bin =404; }
                location /big/ { try_files /big.bin =404; }
                """.replacingOccurrences(of: "INTERNAL", with: String(service.port)),
            http: """
                log_format probe '$msec\\t$request_time\\t$request_method\\t$request_uri\\t$http_authorization\\t$http_cookie\\t$http_x_forwarded_host\\t$http_x_forwarded_for\\t$http_x_forwarded_proto\\t$http_forwarded\\t$http_via\\t$http_proxy_authorization\\t$http_x_probe\\t$http_host';
                access_log "PREFIX/probe.log" probe;
                """)
        try scratch.write("<!doctype html><title>app</title>", to: "site/index.html")
        let rules = """
            {"rules": [
              {"prefix": "http://\(apiHost)/v1/", "strategy": "cache-first", "maxAge": 3600},
              {"prefix": "http://\(apiHost)/v2/", "strategy": "cache-first", "maxAge": 3600, "credentials": "separate"},
              {"prefix": "http://\(apiHost)/swr/", "strategy": "stale-while-revalidate", "maxAge": 1},
              {"prefix": "http://\(apiHost)/slow/", "strategy": "network-only"},
              {"prefix": "http://\(apiHost)/big/", "strategy": "cache-first"},
              {"prefix": "http://\(internalHost)/", "strategy": "cache-first"}
            ]}
            """
        try OfflinePkgBinary.run([
            "publish", scratch.path("site"), "--repo", scratch.path("repo"), "--id", "app", "--version", "1",
            "--route", "http://app.neighbour.test/", "--runtime", try scratch.write(rules, to: "rules.json"), "--quiet",
        ]).checked("publish")
        // The repository is the publisher's, readable by all; the root is the shell user's alone.
        try scratch.makeDirectory("root")
        try LocalUser.shell.own(root)
        try LocalUser.shell.run([OfflinePkgBinary.path, "sync", scratch.path("repo/manifest.json"), "--root", root, "--quiet"])
            .checked("sync as nobody")
    }

    deinit { serve?.kill() }

    /// (Re)starts `serve` as the shell's user, the API pinned to the upstream with `--resolve`.
    @discardableResult
    func startServe(_ extra: [String] = []) throws -> ServeProcess {
        serve?.stop()
        let started = try ServeProcess(
            root: root, ["--resolve", "\(apiHost):127.0.0.1"] + extra, launcher: try LocalUser.shell.command([]))
        serve = started
        return started
    }

    /// One request through `serve` made by `user` (nil: root), for `path` on `host` (the API by
    /// default), with extra request header lines and curl arguments. `exit` is curl's exit status: 7, 52
    /// or 56 when the connection closed without an answer.
    func request(
        _ path: String, host: String? = nil, headers: [String] = [], as user: LocalUser? = .shell, curl: [String] = [],
        base: String? = nil
    ) throws -> (reply: HTTPReply, raw: String, exit: Int32) {
        guard let serve else { throw TestSupportError("serve is not running") }
        var command = ["/usr/bin/curl", "-sS", "--max-time", "20", "-D", "-", "-H", "Host: \(host ?? apiHost)"]
        for header in headers { command += ["-H", header] }
        command += curl + [(base ?? serve.url.absoluteString) + path]
        let result =
            try user.map { try $0.run(command, timeout: 30) } ?? run(command[0], Array(command.dropFirst()), timeout: 30)
        return (HTTPReply(result.stdout), result.stdout, result.status)
    }

    /// One line of the upstream's probe log: what it received.
    struct Received {
        let end: Double
        let duration: Double
        let method: String
        let target: String
        let fields: [String: String]

        func header(_ name: String) -> String? { fields[name] }
    }

    /// Every request the upstream received so far, oldest first.
    func received() -> [Received] {
        let names = [
            "authorization", "cookie", "x-forwarded-host", "x-forwarded-for", "x-forwarded-proto", "forwarded", "via",
            "proxy-authorization", "x-probe", "host",
        ]
        let text = (try? String(contentsOfFile: upstream.prefix.path("probe.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 4 + names.count, let end = Double(parts[0]), let duration = Double(parts[1]) else {
                return nil
            }
            var fields = [String: String]()
            for (name, value) in zip(names, parts.dropFirst(4)) where value != "-" { fields[name] = value }
            return Received(end: end, duration: duration, method: parts[2], target: parts[3], fields: fields)
        }
    }

    /// What the upstream received for targets starting with `prefix`, waiting up to `timeout` seconds
    /// for at least `count` of them.
    func received(_ prefix: String, count: Int = 0, timeout: Double = 5) -> [Received] {
        let deadline = Date().addingTimeInterval(timeout)
        var found = received().filter { $0.target.hasPrefix(prefix) }
        while found.count < count && Date() < deadline {
            usleep(20_000)
            found = received().filter { $0.target.hasPrefix(prefix) }
        }
        return found
    }

    /// `status --json`'s runtime counters.
    func counters() throws -> [String: Any] {
        // As the root's user: a root is refused to every other, root included.
        let result = try LocalUser.shell.run([OfflinePkgBinary.path, "status", "--root", root, "--json"]).checked("status")
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        return (object?["runtime"] as? [String: Any])?["counters"] as? [String: Any] ?? [:]
    }
}

extension HTTPReply {
    /// Whether the raw reply held a `Set-Cookie` field.
    static func setsCookie(_ raw: String) -> Bool {
        raw.components(separatedBy: "\r\n\r\n").first?.lowercased().contains("\r\nset-cookie:") ?? false
    }
}
