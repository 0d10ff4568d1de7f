import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#the-loopback-server, checked with curl over real sockets.
@Suite(.sharedDemo) struct LoopbackServerTests {
    static let host = "demo.offlinepkg.test"
    static let css =
        "body { font-family: sans-serif; background: #0b6e4f; color: #fff; margin: 2rem; }\nh1 { font-size: 2.5rem; }\n"

    func get(_ demo: ServedDemo, _ path: String, _ extra: [String] = []) throws -> HTTPReply {
        HTTPReply(try Tool.curl(["-D", "-", "-H", "Host: \(Self.host)"] + extra + [demo.base + path]).stdout)
    }

    @Test(arguments: LoopbackServer.ThreadModel.allForTests)
    func getAnswersWithTypeLengthETagAndCacheControl(threadModel: LoopbackServer.ThreadModel) async throws {
        let demo = try await ServedDemo(threadModel: threadModel)
        let reply = try get(demo, "css/site.css")
        let resource = try #require(demo.store.resolve("https://demo.offlinepkg.test/css/site.css"))
        #expect(reply.status == 200)
        #expect(reply.headers["content-type"] == "text/css; charset=utf-8")
        #expect(reply.headers["content-length"] == "\(Self.css.utf8.count)")
        #expect(reply.headers["etag"] == resource.etag)
        #expect(reply.headers["cache-control"] == "no-cache")
        #expect(reply.body == Self.css)
        let page = try get(demo, "")
        #expect(page.status == 200 && page.headers["content-type"] == "text/html; charset=utf-8")
        #expect(page.body.contains("<h1 id=\"title\">Hello from the cache</h1>"))
        #expect(try get(demo, "docs/guide/").body.contains("<h1>Guide</h1>"))
    }

    @Test func headSendsHeadersWithoutBody() async throws {
        let demo = try ServedDemo.shared()
        // With --head curl prints the response headers as its output, then what -w reports.
        let result = try Tool.curl([
            "--head", "-H", "Host: \(Self.host)", "-w", "downloaded=%{size_download}", demo.base + "css/site.css",
        ])
        let reply = HTTPReply(result.stdout)
        #expect(reply.status == 200)
        #expect(reply.headers["content-length"] == "\(Self.css.utf8.count)")
        #expect(reply.headers["etag"] != nil)
        #expect(reply.body == "downloaded=0")
    }

    @Test(arguments: [("etag", 304), ("*", 304), ("W/etag", 304), ("\"nope\", etag", 304), ("\"nope\"", 200)])
    func ifNoneMatch(condition: String, status: Int) async throws {
        let demo = try ServedDemo.shared()
        let etag = try #require(demo.store.resolve("https://demo.offlinepkg.test/css/site.css")).etag
        let reply = try get(
            demo, "css/site.css", ["-H", "If-None-Match: " + condition.replacingOccurrences(of: "etag", with: etag)])
        #expect(reply.status == status)
        #expect(reply.headers["etag"] == etag)
        #expect(reply.body.isEmpty == (status == 304))
    }

    @Test(
        arguments: [
            ("bytes=0-3", 206, "bytes 0-3/108", "body"),
            ("bytes=100-", 206, "bytes 100-107/108", "2.5rem; }\n".suffix(8).description),
            ("bytes=-2", 206, "bytes 106-107/108", "}\n"),
            ("bytes=108-", 416, "bytes */108", ""),
            ("bytes=0-1,4-5", 200, nil, css),
        ] as [(String, Int, String?, String)])
    func range(header: String, status: Int, contentRange: String?, body: String) async throws {
        let demo = try ServedDemo.shared()
        let reply = try get(demo, "css/site.css", ["-H", "Range: " + header])
        #expect(reply.status == status)
        #expect(reply.headers["content-range"] == contentRange)
        #expect(reply.body == body)
    }

    @Test func ifRangeWithAnotherETagSendsTheWholeFile() async throws {
        let demo = try ServedDemo.shared()
        let reply = try get(demo, "css/site.css", ["-H", "Range: bytes=0-3", "-H", "If-Range: \"stale\""])
        #expect(reply.status == 200)
        #expect(reply.body == Self.css)
    }

    @Test(arguments: ["nope.css", "css%2Fsite.css", "css/site.css%00", "docs/missing.html"])
    func missIs404(path: String) async throws {
        let demo = try ServedDemo.shared()
        #expect(try get(demo, path).status == 404)
    }

    @Test func unknownHostIs404() async throws {
        let demo = try ServedDemo.shared()
        let reply = HTTPReply(try Tool.curl(["-D", "-", demo.base + "css/site.css"]).stdout)
        #expect(reply.status == 404)
    }

    @Test(arguments: ["POST", "PUT", "DELETE", "OPTIONS"])
    func otherMethodsAre405WithAllow(method: String) async throws {
        let demo = try ServedDemo.shared()
        let reply = try get(demo, "css/site.css", ["-X", method, "--data", "x=1"])
        #expect(reply.status == 405)
        #expect(reply.headers["allow"] == "GET, HEAD")
    }

    @Test func absoluteFormTargetIsResolvedFromItsAuthority() async throws {
        let demo = try ServedDemo.shared()
        // As a proxy receives it: the request line names the whole URL and wins over Host.
        let direct = HTTPReply(
            try Tool.curl([
                "-D", "-", "-H", "Host: elsewhere.test", "--request-target", "http://demo.offlinepkg.test/css/site.css",
                demo.base,
            ]).stdout)
        #expect(direct.status == 200 && direct.body == Self.css)
        let proxied = HTTPReply(try Tool.curl(["-D", "-", "--proxy", demo.base, "http://Demo.OfflinePkg.test/docs/"]).stdout)
        #expect(proxied.status == 200 && proxied.body.contains("<h1>Docs</h1>"))
    }

    @Test func keepAliveReusesTheConnection() async throws {
        let demo = try ServedDemo.shared()
        let result = try Tool.curl([
            "-H", "Host: \(Self.host)", "-o", "/dev/null", "-o", "/dev/null", "-w", "%{http_code} %{num_connects}\n",
            demo.base + "css/site.css", demo.base + "js/app.js",
        ])
        #expect(result.stdout == "200 1\n200 0\n")
    }

    @Test func servesANewSetWrittenByAnotherProcessWithoutRestart() async throws {
        let scratch = try TemporaryDirectory()
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        func publish(_ sequence: Int) throws {
            let site = scratch.path("site-\(sequence)")
            try writeSite(["index.html": "release \(sequence)\n"], to: site)
            try repository.publish(
                sequence: sequence,
                packages: [
                    .init(id: "app", version: "\(sequence).0", routes: ["https://app.example.test/"], site: site)
                ])
        }
        let root = scratch.path("root")
        try publish(1)
        let store = try PackageStore(root: URL(fileURLWithPath: root))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let server = try LoopbackServer(store: store)
        try server.start()
        defer { server.stop() }
        func body() throws -> String {
            try Tool.curl(["-H", "Host: app.example.test", server.url.absoluteString]).stdout
        }
        #expect(try body() == "release 1\n")

        // Another process (the CLI) syncs release 2 into the same root.
        try publish(2)
        let sync = await InProcessCLI.run(["sync", repository.manifestURL.absoluteString, "--root", root, "--quiet"])
        try #require(sync.status == 0, "\(sync.stderr)")
        // Time to the request that first saw release 2, sent, not answered: a curl process takes
        // a while to start on a loaded machine, and that is not the server's delay.
        let switched = Date()
        var asked = Date()
        var answer = try body()
        var log = [String]()
        while answer != "release 2\n" && Date().timeIntervalSince(switched) < 10 {
            log.append(
                String(
                    format: "asked %.2f answered %.2f: %@", asked.timeIntervalSince(switched), Date().timeIntervalSince(switched),
                    answer))
            // A blocking sleep: a Task.sleep waits for a free cooperative thread to resume, and
            // other tests' blocking waits made that take seconds, which is not the server's delay.
            usleep(50_000)
            asked = Date()
            answer = try body()
        }
        #expect(answer == "release 2\n")
        // The store polls every 0.5 s; docs/protocol.md#the-loopback-server asks for "within a second".
        #expect(asked.timeIntervalSince(switched) < 1.0, "\(log)")
    }

    @Test func refusesANonLoopbackHost() async throws {
        let scratch = try TemporaryDirectory()
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        for host in ["0.0.0.0", "192.168.1.10", "::", "example.com"] {
            #expect(throws: OfflinePkgError.self) { try LoopbackServer(store: store, host: host) }
        }
        for host in ["127.0.0.1", "127.1.2.3", "::1", "localhost"] {
            #expect(throws: Never.self) { try LoopbackServer(store: store, host: host) }
        }
    }

    @Test func refusesAHeaderLimitOutsideItsRange() async throws {
        let scratch = try TemporaryDirectory()
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        for bytes in [0, 1023, 64 * 1024 + 1] {
            #expect(throws: OfflinePkgError.self) {
                try LoopbackServer(store: store, limits: .init(requestHeaderBytes: bytes))
            }
        }
        for bytes in [1024, 64 * 1024] {
            #expect(throws: Never.self) { try LoopbackServer(store: store, limits: .init(requestHeaderBytes: bytes)) }
        }
    }

    /// The open-file limit shared out: behind plain HTTP a connection counts twice (its socket and the
    /// file its answer may hold open), the caches keep at most 16 files a lane and all lanes a quarter
    /// of the limit; behind TLS no file is kept and a connection counts once.
    @Test func theDescriptorBudgetLeavesRoomForEveryConnectionsFile() {
        typealias Budget = LoopbackServer.DescriptorBudget
        let plain = Budget(openFiles: 200, asked: 32_768, lanes: 1, tls: false)
        #expect(plain.cachedFilesPerLane == 16 && plain.connections == (200 - 64 - 16) / 2)
        #expect(2 * plain.connections + plain.cachedFilesPerLane + Budget.reserved <= 200)
        let manyLanes = Budget(openFiles: 1024, asked: 32_768, lanes: 64, tls: false)
        #expect(manyLanes.cachedFilesPerLane == 4 && manyLanes.connections == (1024 - 64 - 256) / 2)
        let tls = Budget(openFiles: 1024, asked: 32_768, lanes: 64, tls: true)
        #expect(tls.cachedFilesPerLane == 0 && tls.connections == 1024 - 64)
        #expect(Budget(openFiles: 1 << 20, asked: 32_768, lanes: 1, tls: false).connections == 32_768)
        #expect(Budget(openFiles: nil, asked: 500, lanes: 2, tls: false).connections == 500)
        #expect(Budget(openFiles: 60, asked: 500, lanes: 1, tls: false).connections == 1)
    }

    @Test func listensOnIPv6Loopback() async throws {
        let demo = try ServedDemo.shared()
        let server = try LoopbackServer(store: demo.store, host: "::1")
        try server.start()
        defer { server.stop() }
        #expect(server.url.absoluteString == "http://[::1]:\(server.port)/")
        let reply = HTTPReply(
            try Tool.curl(["-D", "-", "-H", "Host: \(Self.host)", server.url.absoluteString + "css/site.css"]).stdout)
        #expect(reply.status == 200)
    }

    /// A loopback connection has no path to pace for, and BBR's pacing timer cost the one lane its core
    /// when it sends large files to many connections: the server's ends use cubic or reno whatever the
    /// host's default.
    @Test(arguments: LoopbackServer.ThreadModel.allForTests)
    func connectionsUseACongestionControlThatDoesNotPace(threadModel: LoopbackServer.ThreadModel) async throws {
        let demo = try await ServedDemo(threadModel: threadModel)
        let connections = try (0..<2).map { _ in try RawConnection(port: Int(demo.port)) }
        for connection in connections {
            connection.send("GET /css/site.css HTTP/1.1\r\nHost: \(Self.host)\r\n\r\n")
            #expect(connection.readResponse()?.status == 200)
        }
        let used = try SocketStatistics.congestionControls(ofConnectionsFrom: Int(demo.port))
        #expect(used.count == connections.count, "ss showed \(used)")
        #expect(used.allSatisfy { ["cubic", "reno"].contains($0) }, "the server's connections use \(used)")
    }
}

extension LoopbackServer.ThreadModel {
    static let allForTests: [LoopbackServer.ThreadModel] = [.pool(threads: 2), .threadPerConnection]
}
