import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgReports

/// `reports import` and `reports show` through the binary: JSON lines stored once each, refused lines
/// named; a made-up fleet's numbers, in the table, in `--json` and on the page.
@Suite("Reports import and show")
struct ImportAndShowTests {
    static let hour: TimeInterval = 3600

    /// Ten devices over a day: all activate home 1; six activate home 2, of which two revert to 1 and
    /// four confirm; three fail to get home 2 (two with one error, one with another, one of them twice)
    /// and keep 1; one never reports again. Plus a failure before any plan.
    static func fleet(now: Date) -> [ReportEvent] {
        let start = now.addingTimeInterval(-20 * hour)
        var events = [ReportEvent]()
        for device in 0..<10 {
            events.append(
                event(
                    "d\(device)", .activated, [.init(id: "home", from: nil, to: "1", via: "archive", bytes: 1000)],
                    at: start.addingTimeInterval(Double(device))))
        }
        for device in 0..<6 {
            events.append(
                event(
                    "d\(device)", .activated,
                    [.init(id: "home", from: "1", to: "2", via: device < 3 ? "delta" : "files", bytes: 100)],
                    at: start.addingTimeInterval(8 * hour + Double(device)), sequence: 2))
        }
        for device in 0..<2 {
            events.append(
                event(
                    "d\(device)", .reverted, [.init(id: "home", from: "2", to: "1", via: "cache", bytes: 0)],
                    at: start.addingTimeInterval(9 * hour), sequence: 1))
        }
        for device in 2..<6 {
            events.append(
                event(
                    "d\(device)", .confirmed, [.init(id: "home", from: "1", to: "2", via: "cache", bytes: 0)],
                    at: start.addingTimeInterval(9 * hour), sequence: 2))
        }
        let failures = [
            ("d6", "sha256 mismatch for archives/home-2.tar.gz"), ("d7", "sha256 mismatch for archives/home-2.tar.gz"),
            ("d8", "no space left"),
        ]
        for (index, (device, error)) in failures.enumerated() {
            events.append(
                event(
                    device, .failed, [.init(id: "home", from: "1", to: "2", via: nil, bytes: 0)],
                    at: start.addingTimeInterval(10 * hour + Double(index)),
                    error: error, sequence: 2))
        }
        events.append(
            event(
                "d6", .failed, [.init(id: "home", from: "1", to: "2", via: nil, bytes: 0)],
                at: start.addingTimeInterval(11 * hour),
                error: "sha256 mismatch for archives/home-2.tar.gz", sequence: 2))
        events.append(
            event("d8", .failed, [], at: start.addingTimeInterval(12 * hour), error: "signature refused", sequence: nil))
        return events
    }

    /// The fleet as JSON lines: one event per line, then the rest as one array (a logged POST body).
    static func writeLines(_ events: [ReportEvent], to path: String) throws {
        var text = events.prefix(10).map { String(decoding: $0.json, as: UTF8.self) }.joined(separator: "\n") + "\n\n"
        text += String(decoding: body(Array(events.dropFirst(10))), as: UTF8.self) + "\r\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    @Test func importStoresEachEventOnceAndNamesRefusedLines() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-import")
        let events = Self.fleet(now: Date())
        try Self.writeLines(events, to: scratch.path("a.jsonl"))
        _ = try scratch.write(
            "{\"device\":\"d1\"}\nnot json\n" + String(decoding: events[0].json, as: UTF8.self) + "\n", to: "b.jsonl")
        let database = scratch.path("reports.db")
        let first = await InProcessCLI.run([
            "reports", "import", "--db", database, scratch.path("a.jsonl"), scratch.path("b.jsonl"),
        ])
        #expect(first.status == 4, "\(first.stderr)")
        #expect(
            first.stdout.contains(
                "imported \(events.count + 1) event(s) from 14 line(s) of 2 file(s): \(events.count) new, 1 already stored, 2 line(s) refused"
            ), "\(first.stdout)")
        #expect(first.stderr.contains("refused \(scratch.path("b.jsonl")):1: event.time: missing"), "\(first.stderr)")
        #expect(first.stderr.contains("refused \(scratch.path("b.jsonl")):2: events: not valid JSON"), "\(first.stderr)")
        let again = await InProcessCLI.run(["reports", "import", "--db", database, "--json", scratch.path("a.jsonl")])
        #expect(again.status == 0)
        let result = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        #expect(result["stored"] as? Int == 0 && result["duplicates"] as? Int == events.count)
        #expect(try sqlite(database, "SELECT count(*) FROM events") == "\(events.count)")
    }

    @Test func showGivesTheFleetsTrueNumbers() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-show")
        try Self.writeLines(Self.fleet(now: Date()), to: scratch.path("fleet.jsonl"))
        let database = scratch.path("reports.db")
        try await InProcessCLI.run(["reports", "import", "--db", database, "--quiet", scratch.path("fleet.jsonl")]).checked(
            "import")
        let shown = try await InProcessCLI.run(["reports", "show", "--db", database, "--json", "--html", scratch.path("page.html")])
            .checked("show")
        let summary = try JSONDecoder().decode(FleetSummary.self, from: Data(shown.stdout.utf8))
        #expect(summary.devices == 10 && summary.events == 10 + 6 + 2 + 4 + 3 + 1 + 1)
        let home = try #require(summary.packages.first { $0.id == "home" })
        let one = try #require(home.versions.first { $0.version == "1" })
        let two = try #require(home.versions.first { $0.version == "2" })
        // On 1: d0, d1 (reverted), d6, d7, d8 (failed, kept 1), d9. On 2: d2-d5.
        #expect(one.devices == 6 && two.devices == 4)
        #expect(one.activated == 10 && one.reverted == 0 && one.bytes.archive == 10_000)
        #expect(two.activated == 6 && two.failed == 3 && two.reverted == 2 && two.confirmed == 4)
        #expect(two.failureRate == 0.3333 && two.revertRate == 0.3333)
        #expect(two.events.failed == 4 && two.bytes.delta == 300 && two.bytes.files == 300)
        #expect(two.errors.first == .init(error: "sha256 mismatch for archives/home-2.tar.gz", count: 3))
        #expect(summary.errors == [.init(error: "signature refused", count: 1)])
        // Adoption ends where the fleet is now.
        #expect(home.adoption.points.last?.devices == ["1": 6, "2": 4])
        #expect(home.adoption.points.count > 10)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
        let version = try #require(((json["packages"] as? [[String: Any]])?.first?["versions"] as? [[String: Any]])?.last)
        for key in ["version", "devices", "activated", "failed", "reverted"] { #expect(version[key] != nil, "\(key)") }

        let table = try await InProcessCLI.run(["reports", "show", "--db", database]).checked("show").stdout
        #expect(table.contains("10 device(s), 27 event(s)"), "\(table)")
        let row = try #require(table.split(separator: "\n").first { $0.hasPrefix("  2 ") }).split(separator: " ")
        #expect(Array(row.prefix(8)) == ["2", "4", "6", "3", "2", "4", "33.3%", "33.3%"], "\(table)")
        #expect(table.contains("3x sha256 mismatch for archives/home-2.tar.gz"))
    }

    /// The page stands alone: inline SVG charts, no script, no resource from anywhere.
    @Test func thePageStandsAlone() throws {
        let summary = FleetSummary.make(Self.rows(Self.fleet(now: Date())), days: 30, now: Date())
        let page = summary.page
        #expect(page.hasPrefix("<!doctype html>") && page.contains("<svg") && page.contains("<polyline"))
        for forbidden in ["<script", "src=", "href=", "url(", "@import", "@font-face", "http://", "https://"] {
            let hits = page.components(separatedBy: forbidden).count - 1
            let allowed =
                forbidden == "http://" ? page.components(separatedBy: "xmlns=\"http://www.w3.org/2000/svg\"").count - 1 : 0
            #expect(hits == allowed, "the page has \(forbidden)")
        }
        for title in [
            "Adoption: devices on each version over time", "Devices per version now", "Failure and revert rates",
            "Bytes fetched by way",
        ] {
            #expect(page.contains(title), "\(title)")
        }
    }

    /// Events as the database hands them to the summary.
    static func rows(_ events: [ReportEvent]) -> [ReportsDatabase.Row] {
        var rows = [ReportsDatabase.Row]()
        for (index, event) in events.sorted(by: { $0.time < $1.time }).enumerated() {
            let base = ReportsDatabase.Row(
                device: event.device, timeMs: ReportsDatabase.milliseconds(event.time), event: event.event, error: event.error,
                eventID: Int64(index), package: nil, from: nil, to: nil, via: nil, bytes: 0)
            if event.packages.isEmpty { rows.append(base) }
            for package in event.packages {
                var row = base
                (row.package, row.from, row.to, row.via, row.bytes) = (
                    package.id, package.from, package.to, package.via, package.bytes
                )
                rows.append(row)
            }
        }
        return rows
    }
}
