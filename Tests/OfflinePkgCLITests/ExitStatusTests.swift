import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkgCLI

/// docs/protocol.md#exit-statuses, through the real binary.
@Suite("Exit statuses")
struct ExitStatusTests {
    @Test func aSecondSyncExitsThreeAndWaitWaits() async throws {
        let repo = try TestRepository()
        try repo.add(
            "home", "1", routes: ["https://m.example.com/"],
            files: [
                SiteFile("index.html", "x"),  // Random, so the archive stays 3 MB: at 400 KB/s the first sync holds the lock for ~7 s,
                // time enough for the second to start on a loaded machine.
                SiteFile("big.bin", bytes: (0..<3_000_000).map { _ in UInt8.random(in: 0...255) }),
            ])
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path, limitRate: 400_000)
        let root = try TemporaryDirectory()
        let manifest = nginx.url("manifest.json").absoluteString
        let first = try ChildProcess(OfflinePkgBinary.path, ["sync", manifest, "--root", root.path, "--quiet"])
        // Wait until the first sync is downloading (it then holds the lock).
        let deadline = Date().addingTimeInterval(10)
        while nginx.accessLog().isEmpty && Date() < deadline { usleep(20_000) }
        let second = await InProcessCLI.run(["sync", manifest, "--root", root.path])
        #expect(second.status == 3)
        #expect(second.stderr.contains("another sync holds the lock"))
        let waiting = await InProcessCLI.run(["sync", manifest, "--root", root.path, "--wait", "--json"])
        #expect(waiting.status == 0)
        #expect(first.wait().status == 0)
        #expect(waiting.stdout.contains("\"outcome\":\"upToDate\"") || waiting.stdout.contains("\"outcome\":\"notModified\""))
    }

    @Test func statusesForRefusedFailedAndUsage() async throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "x")])
        repo.edit("home") { entry in
            var archive = entry["archive"] as! [String: Any]
            archive["sha256"] = String(repeating: "0", count: 64)
            entry["archive"] = archive
        }
        try repo.publish()
        let root = try TemporaryDirectory()
        let refused = await InProcessCLI.run(["sync", repo.manifestPath, "--root", root.path])
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("sha256 mismatch for archives/home-1.tar.gz: expected 0000"))

        let unreachable = await InProcessCLI.run([
            "sync", "http://127.0.0.1:9/manifest.json", "--root", root.path, "--quiet", "--json",
        ])
        #expect(unreachable.status == 1)
        // --json prints one object on failure too.
        let failure = try JSONSerialization.jsonObject(with: Data(unreachable.stdout.utf8)) as? [String: Any]
        #expect(failure?["exitStatus"] as? Int == 1)
        #expect((failure?["error"] as? String)?.contains("127.0.0.1:9/manifest.json") == true)

        let miss = await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", root.path])
        #expect(miss.status == 1)
        #expect(miss.stderr.contains("no active package answers https://m.example.com/"))

        for usage in [
            ["sync"], ["sync", "a", "b"], ["sync", "x", "--jobs", "0"], ["status", "--bogus"], ["nope"], ["lookup", "not-a-url"],
            ["sync", "x", "--stall-timeout", "0"], ["sync", "x", "--trust-key", "/nonexistent.pub"],
        ] {
            #expect(try await InProcessCLI.run(usage).status == 2, "\(usage)")
        }
    }

    @Test func helpListsEveryCommand() async throws {
        let help = try await InProcessCLI.run(["--help"]).checked()
        for command in OfflinePkgCommand.commands { #expect(help.stdout.contains("  \(command.name)")) }
    }

    @Test func everyFlagStandsApartFromItsHelp() async throws {
        for command in OfflinePkgCommand.commands where !command.options.isEmpty {
            let help = try await InProcessCLI.run([command.name, "--help"]).checked()
            for option in command.options {
                let flag = "  --" + option.name + (option.value.map { " " + $0 } ?? "")
                let line = try #require(help.stdout.split(separator: "\n").first { $0.hasPrefix(flag + " ") }, "\(command.name) --\(option.name)")
                #expect(line.dropFirst(flag.count).hasPrefix("  "), "\(line)")
            }
        }
    }

    @Test func lookupJSONPrintsTheWholeAnswer() async throws {
        let root = try TemporaryDirectory()
        try await InProcessCLI.run(["sync", Fixtures.url("demo-repo/manifest.json").path, "--root", root.path, "--quiet"]).checked()
        let url = "https://demo.offlinepkg.test/docs/guide/"
        let result = try await InProcessCLI.run(["lookup", url, "--root", root.path, "--json"]).checked()
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(Set(object.keys) == ["url", "path", "mimeType", "size", "packageID", "version", "etag", "sha256"])
        #expect(object["url"] as? String == url)
        #expect((object["path"] as? String)?.hasSuffix("/guide/index.html") == true)
        #expect(object["mimeType"] as? String == "text/html; charset=utf-8")
        #expect(object["packageID"] as? String == "docs" && object["version"] as? String == "1.0.0")
        let sha = try #require(object["sha256"] as? String)
        #expect(object["etag"] as? String == "\"" + sha.prefix(32) + "\"")
        #expect(
            object["size"] as? Int == (try FileManager.default.attributesOfItem(atPath: object["path"] as! String)[.size] as? Int)
        )
    }
}
