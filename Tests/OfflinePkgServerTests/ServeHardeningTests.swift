import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The HTTP rules and load limits of docs/protocol.md#the-loopback-server for `offlinepkg serve`, each request also sent to nginx
/// serving the same files, so the table shows where serve agrees with a well-known server and where
/// it knowingly differs.
@Suite(.serialized) struct ServeHardeningTests {
    /// One root with a package at https://m.example.com/home/, and the same files under an nginx root.
    final class Site: Sendable {
        let scratch: TemporaryDirectory
        let root: String

        /// `extra`: more files (name, bytes) in the package.
        init(extra: [String: Data] = [:]) async throws {
            scratch = try TemporaryDirectory()
            let site = scratch.path("docroot/home")
            try writeSite(
                ["index.html": "<title>home</title>", "n.txt": "0123456789", "100%.txt": "percent", "js/app.js": "app()"], to: site)
            for (name, bytes) in extra { try bytes.write(to: URL(fileURLWithPath: site + "/" + name)) }
            let repository = try RepositoryBuilder(directory: scratch.path("repo"))
            try repository.publish(
                sequence: 1, packages: [.init(id: "home", version: "1", routes: ["https://m.example.com/home/"], site: site)])
            root = scratch.path("root")
            let sync = await InProcessCLI.run(["sync", repository.manifestURL.absoluteString, "--root", root, "--quiet"])
            try #require(sync.status == 0, "\(sync.stderr)")
        }

        var documentRoot: String { scratch.path("docroot") }
    }

    static let host = "Host: m.example.com\r\n"
    /// (what, raw request, serve's status, nginx's status).
    static let cases: [(String, [UInt8], Int, Int)] = [
        ("HTTP/1.1 without Host", Array("GET /home/ HTTP/1.1\r\n\r\n".utf8), 400, 400),
        ("two Host fields", Array("GET /home/ HTTP/1.1\r\n\(host)Host: other.example\r\n\r\n".utf8), 400, 400),
        ("Host with a path", Array("GET /n.txt HTTP/1.1\r\nHost: m.example.com/home\r\n\r\n".utf8), 400, 400),
        // nginx takes any bytes after the colon; serve wants digits.
        ("Host with a bad port", Array("GET /home/n.txt HTTP/1.1\r\nHost: m.example.com:8x\r\n\r\n".utf8), 400, 200),
        ("NUL in the target", Array("GET /home/n.txt".utf8) + [0] + Array("x HTTP/1.1\r\n\(host)\r\n".utf8), 400, 400),
        ("control byte in the target", Array("GET /home/n.txt".utf8) + [1] + Array(" HTTP/1.1\r\n\(host)\r\n".utf8), 400, 400),
        // MHD cuts the query off the target in place: no NUL byte of the client's.
        ("a query", Array("GET /home/n.txt?v=3&x HTTP/1.1\r\n\(host)\r\n".utf8), 200, 200),
        ("NUL in the query", Array("GET /home/n.txt?v=3".utf8) + [0] + Array("x HTTP/1.1\r\n\(host)\r\n".utf8), 400, 400),
        ("control byte in the query", Array("GET /home/n.txt?v".utf8) + [1] + Array(" HTTP/1.1\r\n\(host)\r\n".utf8), 400, 400),
        ("bytes=5-2", Array("GET /home/n.txt HTTP/1.1\r\n\(host)Range: bytes=5-2\r\n\r\n".utf8), 416, 416),
        ("bytes=10-", Array("GET /home/n.txt HTTP/1.1\r\n\(host)Range: bytes=10-\r\n\r\n".utf8), 416, 416),
        ("bytes=2-4", Array("GET /home/n.txt HTTP/1.1\r\n\(host)Range: bytes=2-4\r\n\r\n".utf8), 206, 206),
        // docs/protocol.md#lookups: a "%" without two hex digits is a literal "%", as browsers send it; nginx refuses it.
        ("literal %", Array("GET /home/100%.txt HTTP/1.1\r\n\(host)\r\n".utf8), 200, 400),
        ("encoded %", Array("GET /home/100%25.txt HTTP/1.1\r\n\(host)\r\n".utf8), 200, 200),
        ("HTTP/1.0 without Host", Array("GET /home/n.txt HTTP/1.0\r\n\r\n".utf8), 404, 200),
        ("plain GET", Array("GET /home/n.txt HTTP/1.1\r\n\(host)\r\n".utf8), 200, 200),
    ]

    static func status(port: Int, _ request: [UInt8]) throws -> Int {
        let connection = try RawConnection(port: port)
        connection.send(request)
        return connection.readResponse()?.status ?? 0
    }

    @Test func badRequestsSideBySideWithNginx() async throws {
        let site = try await Site()
        let serve = try ServeProcess(root: site.root)
        let nginx = try NginxServer(documentRoot: site.documentRoot, locations: "location / { }")
        var table = [String]()
        for (what, request, serveExpected, nginxExpected) in Self.cases {
            let serveStatus = try Self.status(port: serve.port, request)
            let nginxStatus = try Self.status(port: nginx.port, request)
            table.append("\(what): serve \(serveStatus), nginx \(nginxStatus)")
            #expect(serveStatus == serveExpected, "serve: \(what)")
            #expect(nginxStatus == nginxExpected, "nginx: \(what)")
        }
        print(table.joined(separator: "\n"))
    }

    /// A browser's GET of `total` bytes up to the blank line, made up by one `Cookie` field.
    static func request(totalling total: Int) -> [UInt8] {
        let head = "GET /home/n.txt HTTP/1.1\r\n\(host)"
            + "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36\r\n"
            + "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.9\r\nCookie: s="
        let request = Array(head.utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: total - head.utf8.count - 4) + Array("\r\n\r\n".utf8)
        precondition(request.count == total)
        return request
    }

    /// `--max-header-size N` (default 8192): a request of N bytes of headers is answered, one of
    /// N + 4 KiB is 431, at the smallest, the default and a large setting. Beside nginx's defaults: an
    /// 8,000-byte Cookie line is answered by both, a 9,000-byte one by serve only (nginx's header
    /// lines stop at 8 KiB).
    @Test func requestHeadersUpToTheLimitAreAnsweredAndLargerOnes431() async throws {
        let site = try await Site()
        for limit in [1024, 8192, 32768] {
            let serve = try ServeProcess(root: site.root, limit == 8192 ? [] : ["--max-header-size", String(limit)])
            #expect(try Self.status(port: serve.port, Self.request(totalling: limit)) == 200, "\(limit) bytes of headers, limit \(limit)")
            #expect(
                try Self.status(port: serve.port, Self.request(totalling: limit + 4096)) == 431,
                "\(limit + 4096) bytes of headers, limit \(limit)")
            // A refusal costs that connection only.
            #expect(try Self.status(port: serve.port, Self.request(totalling: 600)) == 200)
        }
        let serve = try ServeProcess(root: site.root)
        let nginx = try NginxServer(documentRoot: site.documentRoot, locations: "location / { }")
        for (cookie, nginxExpected) in [(8000, 200), (9000, 400)] {
            let request = Array("GET /home/n.txt HTTP/1.1\r\n\(Self.host)Cookie: ".utf8)
                + [UInt8](repeating: UInt8(ascii: "a"), count: cookie) + Array("\r\n\r\n".utf8)
            #expect(try Self.status(port: serve.port, request) == 200, "serve: a Cookie of \(cookie) bytes")
            #expect(try Self.status(port: nginx.port, request) == nginxExpected, "nginx: a Cookie of \(cookie) bytes")
        }
        let refused = await InProcessCLI.run(["serve", "--root", site.root, "--max-header-size", "512"])
        #expect(refused.status == 2 && refused.stderr.contains("--max-header-size takes a whole number from 1024"), "\(refused.stderr)")
    }

    /// docs/protocol.md#lookups through the CLI: a literal "%" is a hit; `--scheme app=https` maps a shell's scheme.
    @Test func lookupTakesALiteralPercentAndACustomScheme() async throws {
        let site = try await Site()
        let percent = await InProcessCLI.run(["lookup", "https://m.example.com/home/100%.txt", "--root", site.root])
        #expect(percent.status == 0 && percent.stdout.hasSuffix("/100%.txt\n"), "\(percent.stdout)\(percent.stderr)")
        let mapped = await InProcessCLI.run(["lookup", "app://m.example.com/home/n.txt", "--scheme", "app=https", "--root", site.root])
        #expect(mapped.status == 0 && mapped.stdout.hasSuffix("/n.txt\n"), "\(mapped.stderr)")
        let unmapped = await InProcessCLI.run(["lookup", "app://m.example.com/home/n.txt", "--root", site.root])
        #expect(unmapped.status == 2)
        // No "tls" in status before serve --tls made the key and certificate.
        let status = await InProcessCLI.run(["status", "--json", "--root", site.root])
        #expect(status.status == 0 && !status.stdout.contains("\"tls\""))
    }

    @Test func aMissInsideARouteNamesThePackageAndTheFile() async throws {
        let site = try await Site()
        let serve = try ServeProcess(root: site.root)
        let connection = try RawConnection(port: serve.port)
        connection.send("GET /home/js/gone.js HTTP/1.1\r\n\(Self.host)\r\n")
        let reply = try #require(connection.readResponse())
        #expect(reply.status == 404)
        #expect(reply.body.contains("package home 1"), "\(reply.body)")
        #expect(reply.body.contains("js/gone.js"), "\(reply.body)")
        connection.send("GET /elsewhere.js HTTP/1.1\r\nHost: other.example\r\n\r\n")
        let other = try #require(connection.readResponse())
        #expect(other.status == 404)
        #expect(other.body.contains("no active package answers http://other.example/elsewhere.js"), "\(other.body)")
    }

    @Test func originAnswersTheServersOwnAddress() async throws {
        let site = try await Site()
        let serve = try ServeProcess(root: site.root, ["--origin", "https://m.example.com"])
        for host in ["127.0.0.1:\(serve.port)", "localhost:\(serve.port)", "[::1]:\(serve.port)"] {
            let connection = try RawConnection(port: serve.port)
            connection.send("GET /home/n.txt HTTP/1.1\r\nHost: \(host)\r\n\r\n")
            let reply = try #require(connection.readResponse())
            #expect(reply.status == 200 && reply.body == "0123456789", "\(host)")
        }
        // Another port on loopback is not the server's own address.
        let connection = try RawConnection(port: serve.port)
        connection.send("GET /home/n.txt HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
        #expect(connection.readResponse()?.status == 404)
        let refused = await InProcessCLI.run(["serve", "--root", site.root, "--origin", "https://m.example.com/home/"])
        #expect(refused.status == 2 && refused.stderr.contains("--origin"), "\(refused.stderr)")
    }

    /// A header byte every half second keeps MHD's own timeout from ever firing; the header deadline
    /// closes the connection anyway. A keep-alive connection idle after a request closes at the idle
    /// timeout, however many bytes of a next request trickle in.
    @Test func headerDeadlineAndIdleTimeoutCloseTricklers() async throws {
        let site = try await Site()
        let serve = try ServeProcess(root: site.root, ["--header-timeout", "2", "--idle-timeout", "3"])
        let trickler = try RawConnection(port: serve.port)
        let keptAlive = try RawConnection(port: serve.port)
        keptAlive.send("GET /home/n.txt HTTP/1.1\r\n\(Self.host)\r\n")
        #expect(keptAlive.readResponse()?.status == 200)
        let start = Date()
        var trickleClosed: TimeInterval?
        var keepAliveClosed: TimeInterval?
        let request = Array("GET /home/n.txt HTTP/1.1\r\nX-Slow: ".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 100)
        var sent = 0
        while Date().timeIntervalSince(start) < 8 && (trickleClosed == nil || keepAliveClosed == nil) {
            if trickleClosed == nil {
                if !trickler.send([request[sent % request.count]]) || trickler.isClosedByPeer() {
                    trickleClosed = Date().timeIntervalSince(start)
                }
            }
            if keepAliveClosed == nil {
                if !keptAlive.send([request[sent % request.count]]) || keptAlive.isClosedByPeer() {
                    keepAliveClosed = Date().timeIntervalSince(start)
                }
            }
            sent += 1
            try await Task.sleep(nanoseconds: 500_000_000)
        }
        let trickle = try #require(trickleClosed, "a trickling connection was still open after 8 s")
        let keepAlive = try #require(keepAliveClosed, "a trickling keep-alive connection was still open after 8 s")
        // Deadlines are checked twice a second.
        #expect(trickle >= 1.5 && trickle < 4, "closed after \(trickle) s")
        #expect(keepAlive >= 2.5 && keepAlive < 5, "closed after \(keepAlive) s")
    }

    /// Thousands of idle and trickling connections, then fresh clients: each is answered within
    /// 100 ms. `OFFLINEPKG_FLOOD=10000` holds the full 10,000 of docs/protocol.md#the-loopback-server.
    @Test func aFloodOfHeldConnectionsDoesNotLockOutANewClient() async throws {
        let limit = raiseOpenFileLimit()
        let wanted = Int(ProcessInfo.processInfo.environment["OFFLINEPKG_FLOOD"] ?? "") ?? 3000
        let held = min(wanted, limit - 256)
        try #require(held >= 1500, "open-file limit \(limit) is too low for a flood")
        let site = try await Site()
        let serve = try ServeProcess(root: site.root)
        var connections = [RawConnection]()
        connections.reserveCapacity(held)
        for index in 0..<held {
            let connection = try RawConnection(port: serve.port)
            // Every other one starts a request it never finishes.
            if index % 2 == 1 { connection.send("GET /home/n.txt HTTP/1.1\r\nX-Slow: ") }
            connections.append(connection)
        }
        var waits = [Double]()
        for round in 0..<10 {
            // The tricklers send a byte per round.
            for connection in connections[...] where connection.fd % 2 == 1 { connection.send("a") }
            // A new client arrives a moment after the burst, as it would among tricklers that each send
            // every few seconds (not all in the same millisecond as the probe).
            try await Task.sleep(nanoseconds: 50_000_000)
            let start = Date()
            let probe = try RawConnection(port: serve.port)
            probe.send("GET /home/n.txt HTTP/1.1\r\n\(Self.host)\r\n")
            let reply = probe.readResponse()
            waits.append(Date().timeIntervalSince(start) * 1000)
            #expect(reply?.status == 200, "probe \(round) with \(held) connections held")
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        waits.sort()
        print("flood: \(held) held connections, new-client wait median \(waits[waits.count / 2]) ms, max \(waits.last!) ms")
        #expect(waits.last! < 100, "new-client waits (ms): \(waits)")
        // Still held: nothing closed them early (the header deadline is 10 s).
        #expect(connections.prefix(20).allSatisfy { !$0.isClosedByPeer() })
    }
}
