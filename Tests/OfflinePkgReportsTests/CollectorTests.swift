import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg
@testable import OfflinePkgReports

/// `reports serve` (docs/protocol.md#install-reports): what it answers to good, malformed, oversized and repeated bodies, to a
/// flood, and that the database stays intact through it all and through a `kill -9`.
@Suite("Reports collector")
struct CollectorTests {
    /// An in-process collector on a fresh database.
    final class Rig: Sendable {
        let scratch: TemporaryDirectory
        let collector: ReportsCollector
        var database: String { scratch.path("reports.db") }
        var url: URL { collector.url.appendingPathComponent("reports") }

        init() throws {
            scratch = try TemporaryDirectory(prefix: "offlinepkg-collector")
            collector = try ReportsCollector(database: try ReportsDatabase(path: scratch.path("reports.db")))
            try collector.start()
        }

        deinit { collector.stop() }

        var events: Int { (try? collector.database.counts().events) ?? -1 }
    }

    static let home = [ReportEvent.Package(id: "home", from: "1", to: "2", via: "delta", bytes: 2048)]

    @Test func aBatchIsStoredOnceHoweverOftenItIsSent() async throws {
        let rig = try Rig()
        let batch = body((0..<3).map { event("device-\($0)", .activated, Self.home) })
        var answer = try await post(rig.url, batch)
        #expect(answer.status == 200 && answer.text == "{\"stored\":3,\"duplicates\":0}\n")
        answer = try await post(rig.url, batch)
        #expect(answer.status == 200 && answer.text == "{\"stored\":0,\"duplicates\":3}\n")
        #expect(rig.events == 3)
        #expect(try sqlite(rig.database, "SELECT count(*) FROM event_packages") == "3")
        let health = try await get(rig.collector.url)
        #expect(health.status == 200 && health.text.contains("3 events from 3 devices"))
    }

    /// Each malformed body gets a 400 that names the value and what was expected; nothing of it is stored.
    @Test(arguments: [
        ("not json", "events: not valid JSON"),
        ("{\"device\":\"d\"}", "event.time: missing"),
        ("[1]", "events[0]: expected an event object, got the number 1"),
        (
            "[{\"device\":\"d\",\"time\":\"2026-05-01T10:00:00.000Z\",\"event\":\"installed\",\"packages\":[],\"offlinepkg\":\"0.1.0\"}]",
            "events[0].event: \"installed\" is not one of activated, failed, reverted, confirmed"
        ),
        (
            "[{\"device\":\"d\",\"time\":\"yesterday\",\"event\":\"failed\",\"packages\":[],\"offlinepkg\":\"0.1.0\"}]",
            "events[0].time: expected an RFC 3339 time"
        ),
        (
            "[{\"device\":\"d\",\"time\":\"2026-05-01T10:00:00Z\",\"event\":\"activated\",\"packages\":[{\"id\":\"home\",\"to\":\"2\",\"via\":\"ftp\",\"bytes\":1}],\"offlinepkg\":\"0.1.0\"}]",
            "events[0].packages[0].via: expected null or one of files, delta, archive, cache, got the string \"ftp\""
        ),
        (
            "[{\"device\":\"d e\",\"time\":\"2026-05-01T10:00:00Z\",\"event\":\"activated\",\"packages\":[],\"offlinepkg\":\"0.1.0\"}]",
            "events[0].device: \"d e\" is not a device id"
        ),
        (
            "[{\"device\":\"d\",\"time\":\"2026-05-01T10:00:00Z\",\"event\":\"failed\",\"packages\":[],\"exitStatus\":1.5,\"offlinepkg\":\"0.1.0\"}]",
            "events[0].exitStatus: expected a whole number, got the number 1.5"
        ),
    ])
    func aMalformedBodyGets400NamingWhatIsWrong(_ text: String, _ problem: String) async throws {
        let rig = try Rig()
        let good = String(decoding: event("device-1", .activated, Self.home).json, as: UTF8.self)
        // A good event first: a batch is stored whole or not at all.
        let batch = text.hasPrefix("[") && text != "[1]" ? "[\(good)," + text.dropFirst() : text
        let answer = try await post(rig.url, Array(batch.utf8))
        let expected = batch == text ? problem : problem.replacingOccurrences(of: "events[0]", with: "events[1]")
        #expect(answer.status == 400)
        #expect(answer.text.hasPrefix("bad request: " + expected), "\(answer.text)")
        #expect(rig.events == 0)
    }

    /// 2 MiB, announced or chunked: 413 before (or as soon as) the limit is passed; the server goes on.
    @Test func aTwoMiBBodyGets413() async throws {
        let rig = try Rig()
        let large = [UInt8](repeating: UInt8(ascii: " "), count: 2 << 20)
        let announced = try await post(rig.url, large)
        #expect(
            announced.status == 413 && announced.text.contains("2097152 bytes announced, at most 1048576"), "\(announced.text)")
        let chunked = try await post(rig.url, large, chunked: true)
        #expect(chunked.status == 413 && chunked.text.contains("at most 1048576"), "\(chunked.text)")
        let small = try await post(rig.url, body([event("device-1", .activated, Self.home)]))
        #expect(small.status == 200)
        #expect(rig.events == 1)
    }

    /// 1,000 POSTs, 32 at a time, some repeating, some malformed: every one answered as it should be,
    /// every good event stored once, the file intact.
    @Test func aFloodOf1000PostsIsAnsweredAndTheDatabaseStaysIntact() async throws {
        let rig = try Rig()
        let statuses = Shared<[Int: Int]>([:])
        let start = Date()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<32 {
                group.addTask {
                    for index in stride(from: worker, to: 1000, by: 32) {
                        let bytes: [UInt8]
                        if index % 100 == 99 {
                            bytes = Array("[{\"device\":\"flood-\(index)\"}]".utf8)
                        } else {
                            // Posts 2k and 2k+1 carry the same two events: one of each pair is a resend.
                            let pair = index / 2
                            bytes = body(
                                (0..<2).map {
                                    event(
                                        "flood-\(pair)-\($0)", .activated, Self.home, at: start.addingTimeInterval(Double(pair)))
                                })
                        }
                        let answer = try await post(rig.url, bytes)
                        statuses.with { $0[answer.status, default: 0] += 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(statuses.current == [200: 990, 400: 10])
        // Pairs whose both posts were good store 2 events; a pair with a malformed half still stores its 2.
        #expect(rig.events == 1000)
        #expect(try sqlite(rig.database, "PRAGMA integrity_check") == "ok")
        #expect(try sqlite(rig.database, "PRAGMA journal_mode") == "wal")
    }

    /// A collector killed mid-flood keeps every batch it acknowledged; the file is intact and opens again.
    @Test func aKillDuringAFloodLosesNothingAcknowledged() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-collector")
        let database = scratch.path("reports.db")
        let collector = try CollectorProcess(database: database)
        let acknowledged = Shared<[String]>([])
        let start = Date()
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    for index in 0..<400 {
                        let device = "kill-\(worker)-\(index)"
                        guard
                            let answer = try? await post(
                                collector.url, body([event(device, .activated, Self.home, at: start)]), timeout: 5),
                            answer.status == 200
                        else { return }
                        acknowledged.with { $0.append(device) }
                    }
                }
            }
            group.addTask {
                while acknowledged.current.count < 300 && Date().timeIntervalSince(start) < 60 { usleep(2_000) }
                collector.process.kill()
            }
        }
        let devices = acknowledged.current
        #expect(devices.count >= 300)
        #expect(try sqlite(database, "PRAGMA integrity_check") == "ok")
        let stored = Set(try sqlite(database, "SELECT device FROM events").split(separator: "\n").map(String.init))
        #expect(Set(devices).isSubset(of: stored), "\(Set(devices).subtracting(stored).count) acknowledged events lost")
        let again = try CollectorProcess(database: database)
        #expect(try await get(again.url).status == 200)
    }

    /// Another process holds the write lock past the busy timeout: the device hears 503 and will send
    /// again; `import` says which file is locked.
    @Test func aLockedDatabaseIsSaidSo() async throws {
        let rig = try Rig()
        #expect(try await post(rig.url, body([event("device-1", .activated, Self.home)])).status == 200)
        let holder = try ChildProcess(
            "bash", ["-c", "printf 'BEGIN EXCLUSIVE;\\nSELECT 1;\\n.shell sleep 6\\nCOMMIT;\\n' | sqlite3 '\(rig.database)'"])
        defer { holder.wait(timeout: 15) }
        usleep(500_000)
        let answer = try await post(rig.url, body([event("device-2", .activated, Self.home)]))
        #expect(answer.status == 503 && answer.text.contains("is locked by another process"), "\(answer.text)")
        let lines = rig.scratch.path("events.jsonl")
        try Data(event("device-3", .activated, Self.home).json + [0x0a]).write(to: URL(fileURLWithPath: lines))
        let imported = await InProcessCLI.run(["reports", "import", "--db", rig.database, lines])
        #expect(imported.status == 1)
        #expect(imported.stderr.contains("database \(rig.database) is locked by another process"), "\(imported.stderr)")
        holder.wait(timeout: 15)
        #expect(try await post(rig.url, body([event("device-2", .activated, Self.home)])).status == 200)
        #expect(rig.events == 2)
    }
}
