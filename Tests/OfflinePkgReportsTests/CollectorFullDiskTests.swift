import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgReports

/// The collector's database on a disk that fills up (a small tmpfs; needs root, to mount): devices hear
/// 503 and keep their events, `import` says the disk is full, what was acknowledged stays, the file stays
/// intact.
@Suite("Reports collector on a full disk", .serialized)
struct CollectorFullDiskTests {
    @Test func aFullDiskIsSaidSoAndNothingAcknowledgedIsLost() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-collector-full")
        let disk = try scratch.makeDirectory("disk")
        try run("mount", ["-t", "tmpfs", "-o", "size=512k", "tmpfs", disk]).checked("mount a tmpfs (needs root)")
        defer { _ = try? run("umount", [disk]) }
        let database = disk + "/reports.db"
        let collector = try ReportsCollector(database: try ReportsDatabase(path: database))
        try collector.start()
        defer { collector.stop() }
        let url = collector.url.appendingPathComponent("reports")
        var acknowledged = 0
        var refusal: Answer?
        let padding = String(repeating: "e", count: 2000)
        for batch in 0..<500 {
            let events = (0..<20).map {
                event("full-\(batch)-\($0)", .failed, [.init(id: "home", from: "1", to: "2", via: nil, bytes: 0)], error: padding)
            }
            let answer = try await post(url, body(events))
            if answer.status == 200 {
                acknowledged += 20
                continue
            }
            refusal = answer
            break
        }
        let full = try #require(refusal, "the disk never filled")
        #expect(full.status == 503 && full.text.contains("the disk is full"), "\(full.text)")
        #expect(acknowledged > 0)
        #expect(try collector.database.counts().events == acknowledged)
        #expect(try collector.database.integrityCheck() == "ok")
        // More than the disk holds, in one batch: refused whole, with the reason.
        let late = (0..<300).map {
            String(
                decoding: event(
                    "late-\($0)", .failed, [.init(id: "home", from: "1", to: "2", via: nil, bytes: 0)], error: padding
                ).json, as: UTF8.self)
        }
        let lines = try scratch.write(late.joined(separator: "\n") + "\n", to: "late.jsonl")
        let imported = await InProcessCLI.run(["reports", "import", "--db", database, lines])
        #expect(
            imported.status == 1 && imported.stderr.contains("the disk is full"),
            "\(imported.status) \(imported.stdout) \(imported.stderr)")
        #expect(try collector.database.counts().events == acknowledged)
        #expect(try collector.database.integrityCheck() == "ok")
    }
}
