import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a device says when something is off, as a newcomer meets it: each message names the thing and
/// the way out, and `--json` says what it means.
@Suite("Device messages")
struct DeviceMessagesTests {
    /// A root where nothing was activated has no activation time: null, not a date in 1970.
    @Test func statusOfAnEmptyRootHasNoActivationTime() async throws {
        let scratch = try TemporaryDirectory()
        let root = try scratch.makeDirectory("root")
        let status = try jsonObject(try await InProcessCLI.run(["status", "--root", root, "--json"]).checked().stdout)
        let active = try #require(status["active"] as? [String: Any])
        #expect(active["generation"] as? Int == 0)
        #expect(active.keys.contains("activatedAt") && active["activatedAt"] is NSNull, "\(active)")
        // A root with a set keeps its time.
        let device = try await FleetDevice()
        try await device.publish("1")
        try await device.sync(device.repo + "/manifest.json").checked()
        let activated = try #require(try await device.status()["active"] as? [String: Any])
        #expect(RFC3339Check.parse(activated["activatedAt"] as? String ?? "") != nil)
    }

    /// Each damaged item on a line of its own that reads cleanly, and the way out after them.
    @Test func verifyNamesEachDamageCleanlyAndSuggestsRepair() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        // The second sync links the first one's new content into content/ (a sync of one package
        // leaves that to the next): the damage below then reaches a held file too.
        for _ in 0..<2 { try await device.sync(device.repo + "/manifest.json").checked() }
        let lookup = try await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", device.root]).checked()
        let path = String(lookup.stdout.dropLast())
        chmod(path, 0o644)
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: path))
        let verify = await InProcessCLI.run(["verify", "--root", device.root])
        #expect(verify.status == 4)
        let lines = verify.stderr.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("damaged: held content \(device.root)/content/") }, "\(verify.stderr)")
        #expect(!verify.stderr.contains("(content store)") && !verify.stderr.contains(" : "), "\(verify.stderr)")
        #expect(lines.last == "run offlinepkg verify --repair to fetch the damaged files again (the active set stays as it is)")
        try await InProcessCLI.run(["verify", "--root", device.root, "--repair"]).checked("repair")
        #expect(await InProcessCLI.run(["verify", "--root", device.root]).status == 0)
    }

    /// A server that answers a web page (an error, login or index page) where the signature should be.
    @Test func anHTMLPageWhereTheSignatureShouldBeIsNamed() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let nginx = try NginxServer(
            documentRoot: device.repo,
            locations: """
                location ~ \\.minisig$ { default_type text/html; return 200 "<!DOCTYPE html>\\n<html><body>Sign in</body></html>\\n"; }
                location / { }
                """)
        let refused = try await device.sync(nginx.url("manifest.json").absoluteString)
        #expect(refused.status == 4)
        #expect(
            refused.stderr.contains("it is an HTML page, not a minisign signature: the server answered with a web page"),
            "\(refused.stderr)")
        #expect(!refused.stderr.contains("expected 4 lines"))
    }
}
