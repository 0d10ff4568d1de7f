import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgReports

/// One root's queue written by a host process (this one: its launch records) while `offlinepkg sync`
/// processes record activations and send the queue to a live collector: every event ends up stored or
/// still queued, once.
@Suite("A root's reports queue shared by a host and the command")
struct SharedQueueTests {
    @Test func aHostAndSyncCommandsShareOneQueue() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-shared-queue")
        let collector = try ReportsCollector(database: try ReportsDatabase(path: scratch.path("reports.db")))
        try collector.start()
        defer { collector.stop() }
        let device = try await FleetDevice(scratch)
        try await device.publish("1", ["--reports", collector.url.appendingPathComponent("reports").absoluteString])
        let url = "file://" + device.repo + "/manifest.json"
        try device.sync(url).checked("first sync")
        let layout = CacheLayout(root: device.root)

        // The host records 150 events, a few milliseconds apart, while five syncs activate and send.
        let host = Task.detached {
            for index in 0..<150 {
                ReportQueue(layout: layout).record { device, _ in
                    ReportEvent(device: device, time: Date(), event: .confirmed, sequence: 1000 + index, packages: [])
                }
                try? await Task.sleep(nanoseconds: 3_000_000)
            }
        }
        for version in 2...6 {
            try await device.publish("\(version)")
            try device.sync(url).checked("sync \(version)")
        }
        await host.value
        try device.sync(url).checked("a last send")

        let stored = try sqlite(scratch.path("reports.db"), "SELECT sequence FROM events ORDER BY time_ms").split(separator: "\n")
            .map { Int($0)! }
        let queued = ReportQueue(layout: layout).queued().map {
            (try! JSONSerialization.jsonObject(with: Data($0)) as! [String: Any])["sequence"] as! Int
        }
        let all = stored + queued
        #expect(all.sorted() == (Array(1...6) + Array(1000..<1150)).sorted(), "stored \(stored.count), queued \(queued.count)")
        #expect(Set(stored).isDisjoint(with: queued))
    }
}

/// The fleet tests' publisher and device, in `scratch`.
struct FleetDevice {
    let scratch: TemporaryDirectory
    var repo: String { scratch.path("repo") }
    var root: String { scratch.path("root") }
    var key: String { scratch.path("key") }

    init(_ scratch: TemporaryDirectory) async throws {
        self.scratch = scratch
        try await InProcessCLI.run(["keygen", scratch.path("key")]).checked("keygen")
    }

    func publish(_ version: String, _ extra: [String] = []) async throws {
        let site = scratch.path("sites/\(version)")
        try writeSite([SiteFile("index.html", "home \(version)")], to: site)
        try await InProcessCLI.run(
            [
                "publish", site, "--repo", repo, "--id", "home", "--version", version, "--route", "https://m.example.com/",
                "--sign-key", key + ".key", "--quiet",
            ] + extra
        ).checked("publish \(version)")
    }

    func sync(_ url: String) throws -> ProcessResult {
        try OfflinePkgBinary.run(["sync", url, "--root", root, "--trust-key", key + ".pub", "--quiet"])
    }
}
