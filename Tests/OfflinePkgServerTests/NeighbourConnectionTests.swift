import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#neighbours-on-the-device: `serve` runs as the shell's user and a second, hostile user
/// of the device connects to its loopback port. The kernel says whose socket the other end is.
@Suite(.enabled(if: LocalUser.available, "needs root to act as two users"))
struct NeighbourConnectionTests {
    @Test func anotherUsersConnectionGetsNothing() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        // The shell's own user gets its answers, stored and passed.
        let own = try rig.request("v1/data.json")
        #expect(own.reply.status == 200 && own.reply.body.contains("items"), "\(own.raw)")
        let page = try rig.request("index.html", host: "app.neighbour.test")
        #expect(page.reply.status == 200)

        // Another user: the connection closes without a byte, for the runtime cache and for packages.
        // curl says so as 52 (empty reply), 56 (reset while receiving) or, when the close beats its
        // request out, 55 (reset while sending); 7 if the kernel refused the connection outright.
        for (path, host) in [("v1/data.json", rig.apiHost), ("index.html", "app.neighbour.test")] {
            let hostile = try rig.request(path, host: host, as: .hostile)
            #expect(
                hostile.reply.status == 0 && hostile.raw.isEmpty && [7, 52, 55, 56].contains(hostile.exit),
                "opk-b got \(hostile.reply.status) for \(path) (curl exit \(hostile.exit)): \(hostile.raw.prefix(200))")
        }
        // Root is always admitted.
        #expect(try rig.request("v1/data.json", as: nil).reply.status == 200)
        // Counted where status reports the runtime cache.
        let deadline = Date().addingTimeInterval(3)
        var refused = try rig.counters()["refusedConnections"] as? Int ?? 0
        while refused < 2 && Date() < deadline {
            usleep(100_000)
            refused = try rig.counters()["refusedConnections"] as? Int ?? 0
        }
        let counters = try rig.counters()
        #expect(refused == 2, "\(counters)")

        // --allow-user admits that user, by name.
        try rig.startServe(["--allow-user", LocalUser.hostile.name])
        let allowed = try rig.request("v1/data.json", as: .hostile)
        #expect(allowed.reply.status == 200, "\(allowed.raw)")
    }

    /// The same over IPv6 loopback, and with a raw socket that sends its request before `serve` could
    /// have looked: nothing is answered before the check.
    @Test func anotherUserIsRefusedOverIPv6AndWhenItSendsAtOnce() throws {
        let rig = try NeighbourRig()
        try rig.startServe(["--host", "::1"])
        let base = rig.serve!.url.absoluteString
        #expect(base.hasPrefix("http://[::1]:"))
        let own = try rig.request("v1/data.json", base: base)
        #expect(own.reply.status == 200, "\(own.raw)")
        let hostile = try rig.request("v1/data.json", as: .hostile, base: base)
        #expect(hostile.reply.status == 0 && hostile.raw.isEmpty, "opk-b over ::1 got \(hostile.raw.prefix(200))")

        // A request written in the same breath as the connect, then the socket read at once.
        let port = rig.serve!.port
        let script = """
            exec 3<>/dev/tcp/::1/\(port)
            printf 'GET /v1/data.json HTTP/1.1\\r\\nHost: \(rig.apiHost)\\r\\nConnection: close\\r\\n\\r\\n' >&3
            timeout 5 cat <&3 || true
            """
        let raced = try LocalUser.hostile.run(["/bin/bash", "-c", script], timeout: 20)
        #expect(raced.stdout.isEmpty, "opk-b read \(raced.stdout.prefix(200))")
    }
}
