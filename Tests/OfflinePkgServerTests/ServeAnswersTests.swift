import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What `serve` (and the library, for a host's URL hook) answers where a static server would answer
/// otherwise: a folder without its slash, a Host carrying the server's own port, https for the runtime
/// rules' hosts, runtime upstreams behind a private CA.
@Suite struct ServeAnswersTests {
    /// A single-page app at `/` (fallback `index.html`) with a `help/` folder, and a `docs` package
    /// under `/docs/`, installed through the real sync.
    static func installed(_ scratch: TemporaryDirectory, customSchemes: [String: String] = [:]) async throws -> PackageStore {
        try writeSite(
            ["index.html": "app", "app.js": "js", "help/index.html": "help", "v1.2/index.html": "dotted"], to: scratch.path("app")
        )
        try writeSite(["index.html": "docs"], to: scratch.path("docs"))
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1,
            packages: [
                .init(
                    id: "app", version: "1", routes: ["https://m.example.com/"], fallback: "index.html", site: scratch.path("app")
                ),
                .init(id: "docs", version: "1", routes: ["https://m.example.com/docs/"], site: scratch.path("docs")),
            ])
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, customSchemes: customSchemes))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        return store
    }

    static func get(_ server: LoopbackServer, _ target: String, host: String = "m.example.com") throws -> HTTPReply {
        HTTPReply(try Tool.curl(["-D", "-", "-H", "Host: \(host)", "http://127.0.0.1:\(server.port)\(target)"]).stdout)
    }

    /// nginx answers `/help` with `301 Location: /help/` when `help/` is a folder; so does serve, before
    /// the single-page fallback, which a folder named without its slash is not a miss for.
    @Test func aFolderWithoutItsSlashIsRedirectedToIt() async throws {
        let scratch = try TemporaryDirectory()
        let store = try await Self.installed(scratch)
        let server = try LoopbackServer(store: store)
        try server.start()
        defer { server.stop() }
        for (target, location) in [
            ("/help", "/help/"), ("/help?tab=2", "/help/?tab=2"), ("/docs", "/docs/"), ("/v1.2", "/v1.2/"),
        ] {
            let reply = try Self.get(server, target)
            #expect(reply.status == 301, "\(target): \(reply.status)")
            #expect(reply.headers["location"] == location, "\(target): \(reply.headers)")
        }
        #expect(try Self.get(server, "/help/").body == "help")
        #expect(try Self.get(server, "/docs/").body == "docs")
        #expect(try Self.get(server, "/app.js").body == "js")
        // A navigation miss is still the single-page app's.
        let miss = try Self.get(server, "/settings")
        #expect(miss.status == 200 && miss.body == "app")
        // A proxy's absolute-form target gets an absolute Location.
        let proxied = HTTPReply(
            try Tool.curl(["-D", "-", "--proxy", "http://127.0.0.1:\(server.port)", "http://m.example.com/help"]).stdout)
        #expect(proxied.status == 301 && proxied.headers["location"] == "http://m.example.com/help/")

        // The library tells a host's URL hook the same.
        #expect(store.redirect(for: "https://m.example.com/help?tab=2") == "https://m.example.com/help/?tab=2")
        #expect(store.redirect(for: "https://m.example.com/docs") == "https://m.example.com/docs/")
        #expect(store.resolve("https://m.example.com/help") == nil, "a folder without its slash is no fallback navigation")
        for url in [
            "https://m.example.com/help/", "https://m.example.com/app.js", "https://m.example.com/settings",
            "https://x.example.com/help",
        ] {
            #expect(store.redirect(for: url) == nil, "\(url)")
        }
        let answer = try #require(
            try await store.cachedResponse(url: "https://m.example.com/help"))
        #expect(answer.status == 301 && answer.header("Location") == "https://m.example.com/help/")
    }

    /// A query string is no part of the file a URL names (docs/protocol.md#lookups): `/app.js?v=3` is `app.js`, as a
    /// page's cache-busting links and tracking parameters expect; a NUL in the target is still refused.
    @Test func aQueryStringIsAnsweredAsItsPath() async throws {
        let scratch = try TemporaryDirectory()
        let store = try await Self.installed(scratch)
        let server = try LoopbackServer(store: store)
        try server.start()
        defer { server.stop() }
        for target in ["/app.js?v=3", "/app.js?a=1&b=%41", "/app.js?"] {
            let reply = try Self.get(server, target)
            #expect(reply.status == 200 && reply.body == "js", "\(target): \(reply.status) \(reply.body)")
        }
        #expect(try Self.get(server, "/help/?tab=2").body == "help")
        let connection = try RawConnection(port: Int(server.port))
        #expect(connection.send("GET /app.js\0?v=1 HTTP/1.1\r\nHost: m.example.com\r\n\r\n"))
        #expect(connection.readResponse()?.status == 400)
    }

    /// A runtime-cache URL's query reaches the upstream as the client sent it and keys the stored
    /// answer: page 2 is not answered with page 1's copy.
    @Test func aRuntimeRequestKeepsItsQuery() async throws {
        let rig = try RuntimeCacheRig(
            files: [:], locations: #"location /v1/echo { default_type text/plain; return 200 "args=$args"; }"#)
        try await rig.publishAndSync(strategy: "cache-first", extra: "\"maxAge\": 3600")
        try rig.startServe()
        #expect(try rig.get("v1/echo?page=1&q=a%20b").body == "args=page=1&q=a%20b")
        #expect(try rig.get("v1/echo?page=2").body == "args=page=2")
        let again = try rig.get("v1/echo?page=1&q=a%20b")
        #expect(again.body == "args=page=1&q=a%20b" && again.cacheStatus.hasPrefix("offlinepkg; hit"), "\(again.cacheStatus)")
    }

    @Test func aCustomSchemeFolderIsRedirectedInItsOwnScheme() async throws {
        let scratch = try TemporaryDirectory()
        let store = try await Self.installed(scratch, customSchemes: ["app": "https"])
        #expect(store.redirect(for: "app://m.example.com/help") == "app://m.example.com/help/")
    }

    /// `curl --resolve m.example.com:PORT:127.0.0.1 http(s)://m.example.com:PORT/` sends a Host with the
    /// server's own port: the route of the host answers it, over plain HTTP and behind TLS.
    @Test func aHostWithTheServersOwnPortMatchesTheRoute() async throws {
        let scratch = try TemporaryDirectory()
        let store = try await Self.installed(scratch)
        for tls in [false, true] {
            let server = try LoopbackServer(store: store, tls: tls)
            try server.start()
            defer { server.stop() }
            let port = server.port
            let scheme = tls ? "https" : "http"
            let trust = tls ? ["--cacert", store.layout.root + "/tls/certificate.pem"] : []
            let result = try Tool.curl(
                trust + [
                    "-o", "-", "-w", " %{http_code}", "--resolve", "m.example.com:\(port):127.0.0.1",
                    "\(scheme)://m.example.com:\(port)/docs/",
                ])
            #expect(result.stdout == "docs 200", "\(scheme): \(result.stdout) \(result.stderr)")
            // Another port is another origin: no route answers it.
            if !tls { #expect(try Self.get(server, "/docs/", host: "m.example.com:\(port &+ 1)").status == 404) }
        }
    }

    /// The certificate names the runtime rules' hosts as well as the routes', so a shell that trusts it
    /// per host loads the API through serve too; rules a republish changes (no switch) are named within
    /// a few seconds, without a restart.
    @Test func theCertificateNamesTheRuntimeRulesHosts() async throws {
        let scratch = try TemporaryDirectory()
        try writeSite(["index.html": "app"], to: scratch.path("site"))
        let repo = scratch.path("repo")
        func publish(_ hosts: [String]) async throws {
            let rules = hosts.map { #"{"prefix": "https://\#($0)/v1/", "strategy": "network-first"}"# }.joined(separator: ",")
            let file = try scratch.write(#"{"rules": [\#(rules)]}"#, to: "rules-\(hosts.count).json")
            try await InProcessCLI.run(
                [
                    "publish", scratch.path("site"), "--repo", repo, "--id", "app", "--version", "1", "--route",
                    "https://m.example.com/",
                    "--runtime", file, "--quiet",
                ]
            ).checked("publish")
            try await InProcessCLI.run(["sync", repo + "/manifest.json", "--root", scratch.path("root"), "--quiet"]).checked("sync")
        }
        try await publish(["api.example.com"])
        let serve = try ServeProcess(root: scratch.path("root"), ["--tls"])
        defer { serve.stop() }
        let certificate = scratch.path("root/tls/certificate.pem")
        func names() throws -> String { try shell("openssl x509 -in '\(certificate)' -noout -ext subjectAltName") }
        let first = try names()
        #expect(first.contains("DNS:m.example.com") && first.contains("DNS:api.example.com"), "\(first)")

        try await publish(["api.example.com", "img.example.com"])
        var later = ""
        for _ in 0..<60 where !later.contains("DNS:img.example.com") {
            try await Task.sleep(for: .milliseconds(100))
            later = try names()
        }
        #expect(later.contains("DNS:img.example.com"), "\(later)")
        let served = try Tool.curl(
            [
                "--cacert", certificate, "--connect-to", "img.example.com:443:127.0.0.1:\(serve.port)", "-o", "/dev/null", "-w",
                "%{http_code}",
                "https://img.example.com/v1/none",
            ])
        #expect(served.status == 0, "the certificate presented does not name img.example.com: \(served.stderr)")
    }

    /// `serve --cacert FILE` trusts a private CA for runtime upstreams over https; without it the
    /// system's authorities refuse the upstream's certificate.
    @Test func cacertTrustsAPrivateCAForRuntimeUpstreams() async throws {
        let scratch = try TemporaryDirectory()
        let authority = try TestCertificateAuthority()
        let upstreamRoot = try scratch.makeDirectory("upstream")
        try scratch.write(#"{"from": "the private api"}"#, to: "upstream/v1/hello.json")
        chmod(scratch.path, 0o755)
        let upstream = try NginxServer(
            documentRoot: upstreamRoot, locations: "location / { }", authority: authority,
            authorityNames: "DNS:api.private.test")
        let api = "api.private.test:\(upstream.port)"
        try writeSite(["index.html": "app"], to: scratch.path("site"))
        let rules = try scratch.write(
            #"{"rules": [{"prefix": "https://\#(api)/v1/", "strategy": "network-only"}]}"#, to: "rules.json")
        try await InProcessCLI.run(
            [
                "publish", scratch.path("site"), "--repo", scratch.path("repo"), "--id", "app", "--version", "1", "--route",
                "https://m.example.com/", "--runtime", rules, "--quiet",
            ]
        ).checked("publish")
        try await InProcessCLI.run(["sync", scratch.path("repo/manifest.json"), "--root", scratch.path("root"), "--quiet"])
            .checked()

        for trusted in [true, false] {
            let serve = try ServeProcess(
                root: scratch.path("root"), ["--resolve", "\(api):127.0.0.1"] + (trusted ? ["--cacert", authority.certificatePath] : []))
            defer { serve.stop() }
            let reply = HTTPReply(
                try Tool.curl(["-D", "-", "-H", "Host: \(api)", "http://127.0.0.1:\(serve.port)/v1/hello.json"]).stdout)
            if trusted {
                #expect(reply.status == 200 && reply.body == #"{"from": "the private api"}"#, "\(reply.status) \(reply.body)")
            } else {
                #expect(reply.status != 200, "an upstream behind a private CA answered without --cacert")
            }
        }
        let missing = await InProcessCLI.run(["serve", "--root", scratch.path("root"), "--cacert", scratch.path("nope.pem")])
        #expect(missing.status == 2 && missing.stderr.contains("--cacert: \(scratch.path("nope.pem")) is not a readable file"), "\(missing.stderr)")
    }
}
