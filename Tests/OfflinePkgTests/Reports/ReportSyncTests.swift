import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// Install reports around syncs and launches (docs/protocol.md#install-reports), through a host's `Updater` and `CacheRoot`: the
/// events and their fields, the send after the sync and what each answer does, and that neither the
/// event nor the send can hold up or fail a sync.
@Suite("Install reports of syncs and launches")
struct ReportSyncTests {
    /// A repository (`home 1`) whose manifest names `reportsURL` (default: `collector`'s `/reports`,
    /// which answers 200), and a root a host reads.
    final class Rig: @unchecked Sendable {
        // Used by one test at a time.
        let repo: TestRepository
        let collector: FaultServer
        let root: TemporaryDirectory
        let store: PackageStore

        init(reportsURL: String? = "collector") throws {
            repo = try TestRepository()
            _ = try repo.directory.write("{\"stored\":1}\n", to: "collector/reports")
            collector = try FaultServer(documentRoot: repo.directory.path("collector"), maxLifetime: 120)
            if let reportsURL {
                repo.manifestExtra = [
                    "reports": ["url": reportsURL == "collector" ? collector.url("reports").absoluteString : reportsURL]
                ]
            }
            try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")])
            try repo.publish()
            root = try TemporaryDirectory()
            store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        }

        deinit { collector.stop() }

        func updater(_ change: (inout Updater.Options) -> Void = { _ in }) -> Updater {
            var options = Updater.Options(jobs: 1, shellVersion: "3.2")
            change(&options)
            return Updater(store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath), options: options)
        }

        var queue: ReportQueue { ReportQueue(layout: store.layout) }

        /// The queued events as objects, oldest first.
        var queued: [[String: Any]] {
            queue.queued().map { try! JSONSerialization.jsonObject(with: Data($0)) as! [String: Any] }
        }

        var deviceID: String { DeviceID.existing(store.layout) ?? "" }
    }

    static func packages(_ event: [String: Any]) -> [[String: Any]] { event["packages"] as? [[String: Any]] ?? [] }

    /// Nothing listens on port 1: every send fails, and the events stay in the queue to be read.
    static let nowhere = "http://127.0.0.1:1/reports"

    @Test func anActivationIsReportedWithHowEachPackageCame() async throws {
        let rig = try Rig(reportsURL: Self.nowhere)
        let updater = rig.updater()
        #expect(try await updater.sync().outcome == .activated)
        await updater.reportsSent()
        let event = try #require(rig.queued.first)
        #expect(rig.queued.count == 1)
        #expect(event["event"] as? String == "activated" && event["device"] as? String == rig.deviceID)
        #expect(event["sequence"] as? Int == 1 && event["exitStatus"] as? Int == 0 && event["error"] is NSNull)
        #expect((event["durationMs"] as? Int).map { $0 >= 0 } == true && event["shellVersion"] as? String == "3.2")
        let package = try #require(Self.packages(event).first)
        #expect(package["id"] as? String == "home" && package["from"] is NSNull && package["to"] as? String == "1")
        #expect(package["via"] as? String == "archive" && (package["bytes"] as? Int ?? 0) > 0)
        #expect(rig.queue.loadState()?.lastFailure?.message.contains("127.0.0.1:1") == true)
    }

    /// The collector answers 2xx: the queue empties, the send is noted, the POST was a JSON array.
    @Test func aSentQueueEmpties() async throws {
        let rig = try Rig()
        let updater = rig.updater()
        _ = try await updater.sync()
        await updater.reportsSent()
        let posts = rig.collector.requests(for: "/reports")
        #expect(posts.count == 1 && posts.first?.method == "POST")
        #expect(posts.first?.headers["content-type"] == "application/json")
        #expect(rig.queue.queued().isEmpty && rig.queue.loadState()?.lastSent != nil)
        // A sync that activates nothing records nothing and has nothing to send.
        _ = try await updater.sync()
        await updater.reportsSent()
        #expect(rig.collector.requests(for: "/reports").count == 1)
    }

    /// A failed sync names the release it could not install and why, without the URL's query.
    @Test func aFailedSyncIsReportedWithoutTheURLsSecrets() async throws {
        let rig = try Rig(reportsURL: Self.nowhere)
        let updater = rig.updater()
        _ = try await updater.sync()
        try rig.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        rig.repo.edit("home") { entry in
            var archive = entry["archive"] as! [String: Any]
            archive["url"] = "archives/gone.tar.gz?token=s3cret"
            entry["archive"] = archive
        }
        try rig.repo.publish()
        await #expect(throws: OfflinePkgError.self) { try await updater.sync() }
        await updater.reportsSent()
        let event = try #require(rig.queued.last)
        #expect(event["event"] as? String == "failed" && event["sequence"] as? Int == 2 && event["exitStatus"] as? Int == 1)
        let error = try #require(event["error"] as? String)
        #expect(error.contains("archives/gone.tar.gz") && !error.contains("s3cret") && !error.contains(rig.root.path), "\(error)")
        let package = try #require(Self.packages(event).first)
        #expect(package["from"] as? String == "1" && package["to"] as? String == "2" && package["via"] is NSNull)
    }

    /// A launch never confirmed reverts, and says so; a confirmation is reported once.
    @Test func revertsAndConfirmationsAreReported() async throws {
        let rig = try Rig(reportsURL: Self.nowhere)
        let updater = rig.updater()
        _ = try await updater.sync()
        let writer = CacheRoot(store: rig.store, launchesBeforeRevert: 1)
        try writer.recordLaunch()
        try rig.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try rig.repo.publish()
        _ = try await updater.sync()
        #expect(try writer.recordLaunch() == .awaitingConfirmation(generation: 2, launch: 1))
        #expect(try writer.recordLaunch() == .reverted(from: 2, to: 3))
        var event = try #require(rig.queued.last)
        #expect(event["event"] as? String == "reverted" && event["sequence"] as? Int == 1)
        #expect(event["exitStatus"] is NSNull && event["durationMs"] is NSNull && event["shellVersion"] as? String == "3.2")
        #expect(Self.packages(event).first?["from"] as? String == "2" && Self.packages(event).first?["to"] as? String == "1")

        try rig.repo.add("home", "3", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 3")])
        try rig.repo.publish()
        _ = try await updater.sync()
        try writer.recordLaunch()
        try writer.confirmLaunch(generation: 4)
        try writer.confirmLaunch(generation: 4)
        event = try #require(rig.queued.last)
        #expect(event["event"] as? String == "confirmed" && event["sequence"] as? Int == 3)
        #expect(Self.packages(event).first?["from"] as? String == "1" && Self.packages(event).first?["to"] as? String == "3")
        #expect(rig.queued.map { $0["event"] as! String } == ["activated", "activated", "reverted", "activated", "confirmed"])
    }

    /// The sync returns as soon as it switched, while the send still waits on the collector; the send
    /// gives up at its 10 s deadline, not at the end of the 30 s stall. (Times are measured against each
    /// other, not the clock alone: on a loaded machine a sync itself may take seconds.)
    @Test func aStallingCollectorNeitherHoldsUpNorFailsASync() async throws {
        let rig = try Rig()
        rig.collector.script("/reports", [.stall(afterBytes: 0, seconds: 30)])
        let updater = rig.updater()
        #expect(try await updater.sync().outcome == .activated)
        let synced = Date()
        #expect(rig.store.activeSet.generation == 1)
        #expect(rig.queued.count == 1 && rig.queue.loadState()?.lastFailure == nil, "the send had not ended")
        await updater.reportsSent()
        let ended = Date()
        #expect(
            ended.timeIntervalSince(synced) > 5, "the sync returned \(ended.timeIntervalSince(synced)) s before the send ended")
        let posted = try #require(rig.collector.requests(for: "/reports").first?.receivedAt)
        let took = ended.timeIntervalSince(posted)
        #expect(took > 9 && took < 20, "the send gave up after \(took) s")
        #expect(rig.queued.count == 1)
        #expect(rig.queue.loadState()?.lastFailure?.message.contains("sending install reports") == true)
    }

    /// No redirect is followed (the body would go wherever the answer points); the events stay.
    @Test func aRedirectIsNotFollowed() async throws {
        let rig = try Rig()
        let elsewhere = try FaultServer(documentRoot: rig.repo.directory.path("collector"))
        defer { elsewhere.stop() }
        rig.collector.script("/reports", [.redirect(to: elsewhere.url("reports").absoluteString, status: 307)])
        let updater = rig.updater()
        _ = try await updater.sync()
        await updater.reportsSent()
        #expect(elsewhere.requests.isEmpty)
        #expect(rig.queued.count == 1)
        #expect(rig.queue.loadState()?.lastFailure?.message.contains("follow no redirect") == true)
    }

    /// A 400 says the body itself is wrong: sending it again cannot help, so it goes. A 503 keeps it.
    @Test func aRefusedBatchIsDroppedAndAnUnavailableCollectorKeepsIt() async throws {
        let rig = try Rig()
        rig.collector.script("/reports", [.status(503, retryAfter: "30"), .status(400)])
        let updater = rig.updater()
        _ = try await updater.sync()
        await updater.reportsSent()
        #expect(rig.queued.count == 1)
        try rig.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try rig.repo.publish()
        _ = try await updater.sync()
        await updater.reportsSent()
        #expect(rig.queued.isEmpty)
        #expect(rig.queue.loadState()?.lastFailure?.message.contains("refused them (HTTP status 400") == true)
    }

    /// An answer longer than 64 KiB is not read to its end; the events stay.
    @Test func aLongAnswerIsCutOff() async throws {
        let rig = try Rig()
        rig.collector.script("/reports", [.respond(status: 200, headers: [:], body: [UInt8](repeating: 0x61, count: 200_000))])
        let updater = rig.updater()
        _ = try await updater.sync()
        await updater.reportsSent()
        #expect(rig.queued.count == 1)
        #expect(rig.queue.loadState()?.lastFailure?.message.contains("longer than 65536 bytes") == true)
    }

    /// `Options.reports = false`: what was queued goes unsent, and nothing more is recorded.
    @Test func turnedOffNothingIsRecordedAndTheQueueGoes() async throws {
        let rig = try Rig(reportsURL: Self.nowhere)
        _ = try await rig.updater().sync()
        #expect(rig.queued.count == 1)
        try rig.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try rig.repo.publish()
        let off = rig.updater { $0.reports = false }
        #expect(try await off.sync().outcome == .activated)
        await off.reportsSent()
        #expect(!FileSystem.exists(rig.queue.layout.reportQueue) && rig.queue.loadState() == nil)
        try CacheRoot(store: rig.store, launchesBeforeRevert: 1).rollback()
        #expect(rig.queue.queued().isEmpty)
    }

    /// A manifest without `reports` makes no reports folder; one that drops it ends the reports.
    @Test func aManifestWithoutReportsRecordsNothing() async throws {
        let rig = try Rig(reportsURL: nil)
        _ = try await rig.updater().sync()
        #expect(!FileSystem.exists(rig.queue.layout.reports))

        let named = try Rig(reportsURL: Self.nowhere)
        _ = try await named.updater().sync()
        #expect(named.queued.count == 1)
        named.repo.manifestExtra = [:]
        try named.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try named.repo.publish()
        _ = try await named.updater().sync()
        #expect(named.queue.queued().isEmpty && named.queue.loadState() == nil)
    }
}
