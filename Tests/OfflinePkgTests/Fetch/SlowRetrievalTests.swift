import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// Slow-retrieval protection against a server that trickles one byte a second: each byte restarts the
/// stall clock, so only the rate floor and the manifest's deadline can end the transfer. Each test uses
/// settings of a few seconds; the server stops trickling after 20 s in any case.
@Suite("Slow retrieval")
struct SlowRetrievalTests {
    static let trickle = FaultBehaviour.trickle(every: 1, seconds: 20)

    /// An installed root (home 1 through the fault server) with home 2 published next.
    struct Setup {
        let base: AttackProtectionTests.Setup
        let server: FaultServer

        init() async throws {
            base = try AttackProtectionTests.Setup()
            server = try FaultServer(documentRoot: base.repo.path)
            _ = try await sync(Updater.Options(retry: .init(attempts: 1)))
            try base.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "v2")])
            try base.repo.publish()
        }

        func sync(_ options: Updater.Options) async throws -> SyncReport {
            try await Updater(store: base.store, manifestURL: server.url("manifest.json"), options: options).sync()
        }

        /// Short settings: the stall clock (3 s) never fires on a byte a second.
        func options(minimumRate: Int64 = 64, window: TimeInterval = 2, deadline: TimeInterval = 60, keys: [TrustedKey] = [])
            -> Updater.Options
        {
            var options = Updater.Options(trustedKeys: keys, stallTimeout: 3, retry: .init(attempts: 1))
            options.minimumRate = minimumRate
            options.minimumRateWindow = window
            options.manifestDeadline = deadline
            return options
        }

        /// The requests for `path` once `count` are recorded: the server records a trickled answer when it
        /// notices the client has gone, up to a second after the client gave up.
        func recorded(_ path: String, count: Int) async -> [RecordedRequest] {
            for _ in 0..<50 where server.requests(for: path).count < count { try? await Task.sleep(for: .milliseconds(100)) }
            return server.requests(for: path)
        }

        /// Expects `body` to be refused naming the protection and `url`, well before the trickle ends,
        /// with home 1 still active.
        func expectRefused(_ url: String, _ protection: String, _ body: () async throws -> SyncReport) async throws {
            let before = try base.activeJSON()
            let start = Date()
            await AttackProtectionTests.expectRefused("slow retrieval protection refused \(url): \(protection)", body)
            // The trickle would go on for 20 s; the protection fires after 2-3 s (slack for a loaded machine).
            #expect(Date().timeIntervalSince(start) < 15)
            #expect(try base.activeJSON() == before)
            #expect(base.store.resolve("https://m.example.com/").map(\.version) == "1")
        }
    }

    @Test func aTrickledArchiveIsCutOffByTheRateFloor() async throws {
        let setup = try await Setup()
        setup.server.script("/archives/home-2.tar.gz", [Self.trickle])
        try await setup.expectRefused(setup.server.url("archives/home-2.tar.gz").absoluteString, "below the minimum rate") {
            try await setup.sync(setup.options())
        }
        // The trickle really was one (bytes went out), and one request: no retry was asked for.
        let requests = await setup.recorded("/archives/home-2.tar.gz", count: 1)
        #expect(requests.count == 1 && requests[0].bodyBytesSent >= 1)
    }

    @Test func aTrickledManifestIsCutOffByTheRateFloor() async throws {
        let setup = try await Setup()
        setup.server.script("/manifest.json", [Self.trickle])
        try await setup.expectRefused(setup.server.url("manifest.json").absoluteString, "below the minimum rate") {
            try await setup.sync(setup.options())
        }
    }

    @Test func aTrickledManifestMeetsItsDeadlineEvenWithoutARateFloor() async throws {
        let setup = try await Setup()
        // Two attempts: the deadline spans both, and the second is never started past it.
        setup.server.script("/manifest.json", [Self.trickle, Self.trickle])
        var options = setup.options(minimumRate: 0, deadline: 3)
        options.retry = .init(attempts: 2, baseDelay: 0.05)
        try await setup.expectRefused(
            setup.server.url("manifest.json").absoluteString, "the manifest was not complete within its deadline of 3 s"
        ) { try await setup.sync(options) }
        #expect(setup.server.requests(for: "/manifest.json").count <= 3)
    }

    @Test func aTrickledSignatureMeetsItsDeadline() async throws {
        let setup = try await Setup()
        try setup.base.sign()
        setup.server.script("/manifest.json.minisig", [Self.trickle])
        let keys = try setup.base.trusted()
        try await setup.expectRefused(
            setup.server.url("manifest.json.minisig").absoluteString, "the signature was not complete within its deadline of 3 s"
        ) { try await setup.sync(setup.options(minimumRate: 0, deadline: 3, keys: keys)) }
    }

    @Test func aFastTransferPassesTheFloor() async throws {
        let setup = try await Setup()
        let report = try await setup.sync(setup.options(minimumRate: 1 << 20, window: 1, deadline: 5))
        #expect(report.outcome == .activated)
    }
}
