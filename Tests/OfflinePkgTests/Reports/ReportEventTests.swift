import Foundation
import Testing

@testable import OfflinePkg

/// An event's JSON is exactly the protocol's object (docs/protocol.md#the-event), and carries no secret a URL or a path held.
@Suite("Report event")
struct ReportEventTests {
    static let fields = [
        "device", "time", "event", "sequence", "packages", "exitStatus", "error", "durationMs", "shellVersion", "offlinepkg",
    ]

    @Test func theObjectHasExactlyTheSpecsFieldsInItsOrder() throws {
        let event = ReportEvent(
            device: "0f6c2b1e-7d1d-4a7e-9b8f-1c2d3e4f5a6b", time: Date(timeIntervalSince1970: 1_780_000_000.123),
            event: .activated,
            sequence: 7, packages: [.init(id: "home", from: "1.0", to: "1.1", via: "delta", bytes: 2048)], exitStatus: 0,
            durationMs: 812, shellVersion: "3.2")
        let text = String(decoding: event.json, as: UTF8.self)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(event.json)) as? [String: Any])
        #expect(Set(object.keys) == Set(Self.fields))
        let positions = Self.fields.map { text.range(of: "\"\($0)\":")!.lowerBound }
        #expect(positions == positions.sorted(), "\(text)")
        #expect(object["time"] as? String == "2026-05-28T20:26:40.123Z")
        let package = try #require((object["packages"] as? [[String: Any]])?.first)
        #expect(Set(package.keys) == ["id", "from", "to", "via", "bytes"])
        #expect(package["bytes"] as? Int == 2048 && package["via"] as? String == "delta")
        #expect(object["error"] is NSNull && object["offlinepkg"] as? String == OfflinePkgVersion.current)
        #expect(!text.contains("\n"))
    }

    @Test func errorsLoseURLSecretsAndTheRootsPath() {
        let message =
            "download https://user:pa55@cdn.example.com/archives/home-2.tar.gz?token=s3cret#frag failed in /home/alice/.local/share/offlinepkg/staging: HTTP status 404"
        let cleaned = ReportEvent.sanitized(message, root: "/home/alice/.local/share/offlinepkg")
        #expect(cleaned == "download https://cdn.example.com/archives/home-2.tar.gz failed in <root>/staging: HTTP status 404")
        let long = ReportEvent.sanitized(String(repeating: "é", count: 2000), root: "/r")
        #expect(long.utf8.count <= ReportEvent.maximumErrorBytes && long.hasSuffix("..."))
    }

    @Test func timesRoundTripToTheMillisecond() {
        let time = ReportTime.format(Date(timeIntervalSince1970: 1_780_000_000.5))
        #expect(time == "2026-05-28T20:26:40.500Z")
        #expect(ReportTime.milliseconds(time) == 1_780_000_000_500)
        #expect(ReportTime.milliseconds("2026-05-28T20:26:40Z") == 1_780_000_000_000)
        #expect(ReportTime.milliseconds("2026-05-28T22:26:40.5+02:00") == 1_780_000_000_500)
        #expect(ReportTime.milliseconds("yesterday") == nil)
    }
}
