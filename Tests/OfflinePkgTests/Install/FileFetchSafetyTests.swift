import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// What a file-level update (docs/protocol.md#chunked-archives-and-file-indexes) must not trust: held content on its name's word (one damaged
/// inode would spread into every new tree), and a server's range answer to ever end.
@Suite struct FileFetchSafetyTests {
    static func sync(_ root: String, _ url: URL, events: EventLog = EventLog(), rangeDeadline: TimeInterval? = nil) async throws
        -> SyncReport
    {
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
        var options = Updater.Options(retry: RetryPolicy(attempts: 2, baseDelay: 0.05), events: { events.append($0) })
        if let rangeDeadline { options.rangeRequestDeadline = rangeDeadline }
        return try await Updater(store: store, manifestURL: url, options: options).sync()
    }

    /// A held file damaged in place (bit rot, an edit by root) that the next version shares: the sync
    /// hashes it before linking it, drops it, reports it, and fetches that file's frames with the others,
    /// so the new tree is right.
    @Test func damagedHeldContentIsFetchedAgainNotLinkedIntoTheNewTree() async throws {
        let repo = try FileFetchTests.Repo()
        let v1 = try repo.publish(1)
        let root = try TemporaryDirectory(prefix: "files-damaged")
        _ = try await Self.sync(root.path, repo.manifestURL)
        // The second run takes the first one's content in (a sync of one package leaves it pending).
        _ = try await Self.sync(root.path, repo.manifestURL)
        for version in 2...5 { try repo.publish(version) }
        let v5 = try #require(repo.reports[5])
        // A file v1 and v5 share: damaged through its held inode, so v1's tree sees it too.
        let shared = try #require(v5.members.first { member in member.path.hasSuffix(".bin") && FileFetchTests.held(v1).contains(member.sha256) })
        let layout = CacheLayout(root: root.path)
        let held = layout.content(sha256: shared.sha256)
        #expect(chmod(held, 0o644) == 0)
        let handle = try #require(FileHandle(forUpdatingAtPath: held))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data("rot".utf8))
        try handle.close()
        #expect(chmod(held, 0o444) == 0)

        let events = EventLog()
        let before = repo.nginx.accessLog().count
        let report = try await Self.sync(root.path, repo.manifestURL, events: events)
        #expect(report.changes.first?.via == .files, "\(events.all)")
        // The damaged file came with the frames: the needed frames of a device that lacks it.
        var stillHeld = FileFetchTests.held(v1)
        stillHeld.remove(shared.sha256)
        try FileFetchTests.expectOnlyNeededFrames(repo, v5, held: stillHeld, before: before, report: report, "damaged held file")
        #expect(sameFiles(repo.site("app", 5), layout.tree(id: "app", version: "5.0", treeHash: FileFetchTests.tree(v5))))
        let damage = events.all.compactMap { if case .contentDamaged(let path, let problem) = $0 { (path, problem) } else { nil } }
        #expect(damage.count == 1 && damage.first?.0 == held, "\(events.all)")
        #expect(damage.first.map { $0.1.contains("expected \(shared.sha256) (its name)") } == true, "\(damage)")
        // The sound copy is what is held now.
        #expect(try FileHasher.sha256(ofFile: held) == shared.sha256)
    }

    /// A server that trickles its multipart answer to the range request: the request is cut off at its
    /// time limit (not at the rate floor's window, nor never), and the archive comes in the same sync.
    @Test func aTrickledMultipartAnswerIsCutOffAndTheArchiveComesInTheSameSync() async throws {
        let repo = try FileFetchTests.Repo()
        let server = try FaultServer(documentRoot: repo.repo, maxLifetime: 600)
        try repo.publish(1)
        let root = try TemporaryDirectory(prefix: "files-trickle")
        _ = try await Self.sync(root.path, server.url("manifest.json"))
        for version in 2...5 { try repo.publish(version) }
        let v5 = try #require(repo.reports[5])
        // About 200 bytes a second for up to 60 s, then the rest: under the 1 KiB/s floor, whose
        // 30-second window would end it only after 30 s (twice, with the retry).
        // The first answer is to the HEAD that asks how the origin takes ranges (a 206 without a body).
        server.script("/" + v5.archiveURL, [.trickleRanges(every: 0.005, seconds: 60), .trickleRanges(every: 0.005, seconds: 60)])
        let events = EventLog()
        let started = ContinuousClock.now
        let report = try await Self.sync(root.path, server.url("manifest.json"), events: events, rangeDeadline: 1)
        let elapsed = ContinuousClock.now - started
        #expect(report.outcome == .activated)
        #expect(report.changes.first?.via == .archive)
        let failures = events.all.compactMap { if case .filesFailed(_, _, let error) = $0 { error } else { nil } }
        #expect(failures.count == 1, "\(events.all)")
        guard case .slowRetrieval(_, .deadline(let what, _))? = failures.first else {
            Issue.record("not cut off by the range request's time limit: \(failures)")
            return
        }
        #expect(what.hasPrefix("range request"))
        #expect(elapsed < .seconds(20), "the sync took \(elapsed)")
        // The range request (several spans), then the plain download; recorded as each answer ended:
        // the trickled one when the server's next write finds the connection cut (bounded wait; once in
        // CI the check came first).
        var requests = server.requests(for: v5.archiveURL).filter { $0.method == "GET" }
        for _ in 0..<250 where requests.count < 2 {
            usleep(20_000)
            requests = server.requests(for: v5.archiveURL).filter { $0.method == "GET" }
        }
        #expect(requests.count == 2, "\(requests.map(\.headers))")
        #expect(requests.contains { $0.headers["range"]?.contains(",") == true }, "\(requests.map(\.headers))")
        #expect(requests.contains { $0.headers["range"] == nil }, "\(requests.map(\.headers))")
        let layout = CacheLayout(root: root.path)
        #expect(sameFiles(repo.site("app", 5), layout.tree(id: "app", version: "5.0", treeHash: FileFetchTests.tree(v5))))
    }
}
