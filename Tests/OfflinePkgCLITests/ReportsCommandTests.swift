import Foundation
import OfflinePkgTestSupport
import Testing

/// The command line of install reports (docs/protocol.md#install-reports): `publish --reports`, `sync --no-reports` and
/// `OFFLINEPKG_REPORTS`, `status --json`'s queue, and the `reports` commands' usage.
@Suite("Reports command line")
struct ReportsCommandTests {
    /// A URL nothing answers: sends fail and the queue keeps what it holds.
    static let nowhere = "http://127.0.0.1:1/reports"

    func manifestReports(_ device: FleetDevice) throws -> String? {
        let manifest = try jsonObject(String(contentsOfFile: device.repo + "/manifest.json", encoding: .utf8))
        return (manifest["reports"] as? [String: Any])?["url"] as? String
    }

    @Test func publishSetsKeepsAndRemovesTheReportsURL() async throws {
        let device = try await FleetDevice()
        try await device.publish("1", ["--reports", Self.nowhere])
        #expect(try manifestReports(device) == Self.nowhere)
        try await device.publish("2")
        #expect(try manifestReports(device) == Self.nowhere)
        try await device.publish("3", ["--reports", "none"])
        #expect(try manifestReports(device) == nil)
        let site = device.scratch.path("sites/3")
        let refused = await InProcessCLI.run(
            [
                "publish", site, "--repo", device.repo, "--id", "home", "--version", "4", "--route", "https://m.example.com/",
                "--reports", "ftp://r.example.com/",
            ])
        #expect(
            refused.status == 2
                && refused.stderr.contains("reports URL \"ftp://r.example.com/\" is not an absolute http or https URL"),
            "\(refused.stderr)")
    }

    /// A sync's exit status is its own, whatever happens to its reports; `status --json` shows the queue.
    @Test func reportsQueueWhileTheCollectorIsAwayAndStatusShowsThem() async throws {
        let device = try await FleetDevice()
        try await device.publish("1", ["--reports", Self.nowhere])
        let url = "file://" + device.repo + "/manifest.json"
        #expect(try await device.sync(url).status == 0)
        let reports = try #require(try await device.status()["reports"] as? [String: Any])
        #expect(reports["url"] as? String == Self.nowhere && reports["events"] as? Int == 1)
        #expect((reports["bytes"] as? Int ?? 0) > 100)
        let failure = try #require(reports["lastFailure"] as? [String: Any])
        #expect((failure["message"] as? String)?.contains("127.0.0.1:1") == true)
        let text = await InProcessCLI.run(["sync", url, "--root", device.root, "--trust-key", device.key + ".pub"])
        #expect(text.status == 0)
        #expect(text.stderr.contains("install reports not sent, 1 kept for the next sync"), "\(text.stderr)")
        // A refused release is exit 4 with or without its report sent.
        try await device.publish("2")
        let archive = try #require(
            FileManager.default.enumerator(atPath: device.repo + "/archives/home/2")?.allObjects.first as? String)
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: device.repo + "/archives/home/2/" + archive))
        #expect(try await device.sync(url).status == 4)
        #expect((try await device.status()["reports"] as? [String: Any])?["events"] as? Int == 2)
    }

    @Test(arguments: [(["--no-reports"], [String: String]()), ([], ["OFFLINEPKG_REPORTS": "0"])])
    func theDeviceOwnerTurnsReportsOff(_ options: [String], _ environment: [String: String]) async throws {
        let device = try await FleetDevice()
        try await device.publish("1", ["--reports", Self.nowhere])
        let url = "file://" + device.repo + "/manifest.json"
        #expect(try await device.sync(url).status == 0)
        #expect(FileManager.default.fileExists(atPath: device.root + "/reports/queue.jsonl"))
        try await device.publish("2")
        let merged = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        #expect(try await device.sync(url, options, environment: merged).status == 0)
        #expect(!FileManager.default.fileExists(atPath: device.root + "/reports/queue.jsonl"))
        #expect(!FileManager.default.fileExists(atPath: device.root + "/reports/state.json"))
        #expect(try await device.status()["reports"] == nil)
        let bad = try await device.sync(
            url, [], environment: ProcessInfo.processInfo.environment.merging(["OFFLINEPKG_REPORTS": "maybe"]) { $1 })
        #expect(bad.status == 2 && bad.stderr.contains("OFFLINEPKG_REPORTS takes 0 (reports off) or 1, got \"maybe\""))
    }

    @Test func theReportsCommandsNeedWhatTheyNeed() async throws {
        let scratch = try TemporaryDirectory()
        var result = await InProcessCLI.run(["reports"])
        #expect(result.status == 2 && result.stderr.contains("reports needs one of: reports serve, reports import, reports show"))
        result = await InProcessCLI.run(["reports", "tally"])
        #expect(result.status == 2 && result.stderr.contains("unknown command \"reports tally\""))
        result = await InProcessCLI.run(["reports", "serve"])
        #expect(result.status == 2 && result.stderr.contains("reports serve needs --db FILE"))
        result = await InProcessCLI.run(["reports", "import", "--db", scratch.path("r.db")])
        #expect(result.status == 2 && result.stderr.contains("reports import needs <jsonl>..."))
        result = await InProcessCLI.run(["reports", "show", "--db", scratch.path("none.db")])
        #expect(result.status == 1 && result.stderr.contains("no reports database at \(scratch.path("none.db"))"))
        _ = try scratch.write("not sqlite at all, and long enough to be read as a header of one", to: "other.db")
        result = await InProcessCLI.run(["reports", "show", "--db", scratch.path("other.db")])
        #expect(result.status == 1 && result.stderr.contains("is not an intact SQLite database"), "\(result.stderr)")
        result = await InProcessCLI.run(["reports", "serve", "--db", scratch.path("r.db"), "--host", "nowhere.example"])
        #expect(
            result.status == 2 && result.stderr.contains("host nowhere.example is not an IPv4 or IPv6 address"),
            "\(result.stderr)")
        result = await InProcessCLI.run(["reports", "show", "--help"])
        #expect(
            result.status == 0
                && result.stdout.contains("usage: offlinepkg reports show [--db FILE] [--days N] [--json] [--html OUT]"))
    }
}
