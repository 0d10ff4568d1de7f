import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#neighbours-on-the-device against the pages of the shell's own user: a page that carries no credential, or
/// another one, and a page that tries to steer what the device fetches and sends upstream.
@Suite(.enabled(if: LocalUser.available, "needs root to run serve as an unprivileged user"))
struct NeighbourAnswerTests {
    @Test func aCredentialedAnswerNeverReachesAnotherCredential() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        let alice = try rig.request("v1/me", headers: ["Authorization: Bearer alice"])
        #expect(alice.reply.body.contains("Bearer alice"), "\(alice.raw)")
        // Without a credential, with another, with the same one in another case: never Alice's answer
        // from the cache.
        for headers in [[], ["Authorization: Bearer mallory"], ["authorization: Bearer mallory"], ["Cookie: session=x"]] {
            let other = try rig.request("v1/me", headers: headers)
            #expect(
                !other.reply.body.contains("alice") && !other.reply.cacheStatus.contains("hit"),
                "\(headers) got \(other.reply.cacheStatus): \(other.reply.body)")
        }
        let cookie = try rig.request("v1/me?c", headers: ["Cookie: session=alice"])
        #expect(cookie.reply.body.contains("session=alice"))
        let noCookie = try rig.request("v1/me?c")
        #expect(!noCookie.reply.body.contains("alice"), "\(noCookie.reply.cacheStatus): \(noCookie.reply.body)")
        // `Cache-Control: private` is never stored by a rule that does not say "separate".
        let first = try rig.request("v1/private")
        let second = try rig.request("v1/private")
        #expect(first.reply.body != second.reply.body && !second.reply.cacheStatus.contains("hit"), "\(second.raw)")

        // A "separate" rule stores per credential: the same one gets its answer back, no other does.
        #expect(try rig.request("v2/me", headers: ["Authorization: Bearer alice"]).reply.cacheStatus.contains("stored"))
        let again = try rig.request("v2/me", headers: ["Authorization: Bearer alice"])
        #expect(again.reply.cacheStatus.hasPrefix("offlinepkg; hit") && again.reply.body.contains("Bearer alice"), "\(again.raw)")
        for headers in [[], ["Authorization: Bearer bob"], ["Authorization: Bearer alice", "Cookie: a=1"]] {
            let other = try rig.request("v2/me", headers: headers)
            #expect(!other.reply.body.contains("alice") || headers.contains("Cookie: a=1"), "\(headers): \(other.raw)")
            #expect(!other.reply.cacheStatus.contains("hit"), "\(headers): \(other.reply.cacheStatus)")
        }
        #expect(rig.received("/v2/me").count == 4)
        // No credential reaches a file: the stored heads hold none.
        let heads = try shell("cat '\(rig.root)'/runtime/entries/*.meta")
        #expect(!heads.contains("Bearer alice") && !heads.contains("session="))
    }

    @Test func setCookieNeverComesFromTheCache() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        let first = try rig.request("v1/cookie")
        #expect(HTTPReply.setsCookie(first.raw), "the request that caused the answer gets its cookie: \(first.raw)")
        let second = try rig.request("v1/cookie")
        #expect(second.reply.cacheStatus.hasPrefix("offlinepkg; hit"), "\(second.raw)")
        #expect(!HTTPReply.setsCookie(second.raw), "a hit replayed the cookie: \(second.raw)")
        // Four requests sharing one upstream transfer: one cookie, for the one that caused it.
        let url = rig.serve!.url.absoluteString + "v1/cookie-slow"
        let together = try LocalUser.shell.run(
            [
                "/usr/bin/curl", "-sS", "--parallel", "--parallel-immediate", "-D", "-", "-o", "/dev/null", "-H",
                "Host: \(rig.apiHost)",
            ]
                + [url, url, url, url], timeout: 30)
        let cookies = together.stdout.lowercased().components(separatedBy: "\r\nset-cookie:").count - 1
        #expect(cookies == 1, "\(together.stdout)")
        let heads = try shell("cat '\(rig.root)'/runtime/entries/*.meta")
        #expect(!heads.lowercased().contains("set-cookie"), "\(heads)")
    }

    @Test func aRedirectIsPassedBackUnfollowed() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        for (path, target) in [("v1/redirect-loopback", "127.0.0.1"), ("v1/redirect-any", "0.0.0.0")] {
            for _ in 0..<2 {
                let reply = try rig.request(path)
                #expect(
                    reply.reply.status == 302
                        && reply.reply.headers["location"] == "http://\(target):\(rig.service.port)/internal",
                    "\(reply.raw)")
                #expect(!reply.reply.body.contains("internal secret") && !reply.reply.cacheStatus.contains("hit"))
            }
            #expect(rig.received("/" + path).count == 2, "a redirect is not stored")
        }
        #expect(rig.service.accessLog().isEmpty, "the internal server was reached: \(rig.service.accessLog())")
    }

    @Test func whatIsSentUpstreamIsWhatWasChecked() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        // Matched as /v1/data.json: sent as /v1/data.json, never as the raw target.
        let dotted = try rig.request("admin/%2e%2e/v1/data.json", curl: ["--path-as-is"])
        #expect(dotted.reply.status == 200)
        let targets = rig.received("/", count: 1).map(\.target)
        #expect(targets == ["/v1/data.json"], "upstream received \(targets)")
        // A Host that fails §10's checks is never forwarded, whatever the method.
        for host in ["x@\(rig.apiHost)", "\(rig.apiHost) x"] {
            for method in [["--data", "x=1"], ["-X", "PUT", "--data", "x"], []] {
                let reply = try rig.request("v1/submit", host: host, curl: method)
                #expect(reply.reply.status == 400, "\(host) \(method): \(reply.reply.status)")
            }
        }
        // Two Host fields (curl sends only the first of two): written on a raw connection.
        let twoHosts = try LocalUser.shell.run(
            [
                "/bin/bash", "-c",
                """
                exec 3<>/dev/tcp/127.0.0.1/\(rig.serve!.port)
                printf 'POST /v1/submit HTTP/1.1\\r\\nHost: \(rig.apiHost)\\r\\nHost: \(rig.apiHost)\\r\\nContent-Length: 3\\r\\nConnection: close\\r\\n\\r\\nx=1' >&3
                timeout 5 cat <&3 || true
                """,
            ], timeout: 20)
        #expect(twoHosts.stdout.hasPrefix("HTTP/1.1 400"), "\(twoHosts.stdout.prefix(200))")
        #expect(rig.received("/v1/submit").isEmpty, "\(rig.received("/v1/submit").map(\.fields))")
    }

    @Test func forwardingHeadersNeverGoUpstream() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        let headers = [
            "X-Forwarded-Host: evil.test", "x-FORWARDED-for: 6.6.6.6", "X-Forwarded-Proto: https", "Forwarded: host=evil.test",
            "Via: 1.1 evil", "Proxy-Authorization: Basic ZXZpbA==", "X-Probe: kept",
        ]
        let reply = try rig.request("v1/echo", headers: headers)
        #expect(reply.reply.status == 200)
        let received = try #require(rig.received("/v1/echo", count: 1).first)
        for name in ["x-forwarded-host", "x-forwarded-for", "x-forwarded-proto", "forwarded", "via", "proxy-authorization"] {
            #expect(received.header(name) == nil, "\(name) reached upstream: \(received.fields)")
        }
        #expect(received.header("x-probe") == "kept", "an ordinary header still goes")
        #expect(received.header("host") == rig.apiHost)
    }

    /// A stale answer's background refresh carries what the stored answer is keyed by, not the
    /// headers of whichever request found it stale.
    @Test func aStaleRefreshCarriesNothingOfTheRequestThatTriggeredIt() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        #expect(try rig.request("swr/feed").reply.cacheStatus.contains("stored"))
        usleep(1_300_000)
        let stale = try rig.request("swr/feed", headers: ["X-Probe: attacker", "X-Forwarded-Host: evil.test"])
        #expect(stale.reply.cacheStatus.contains("revalidating"), "\(stale.reply.cacheStatus)")
        let refresh = try #require(rig.received("/swr/feed", count: 2).dropFirst().first)
        #expect(refresh.header("x-probe") == nil && refresh.header("x-forwarded-host") == nil, "\(refresh.fields)")
    }

    @Test func aNameThatResolvesToLoopbackIs502UnlessAllowed() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        let reply = try rig.request("internal", host: rig.internalHost)
        #expect(reply.reply.status == 502 && !reply.reply.body.contains("secret"), "\(reply.raw)")
        #expect(rig.service.accessLog().isEmpty)
        try rig.startServe(["--allow-private-upstream"])
        let allowed = try rig.request("internal", host: rig.internalHost)
        #expect(allowed.reply.status == 200 && allowed.reply.body == "internal secret\n", "\(allowed.raw)")
    }
}
