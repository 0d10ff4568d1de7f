import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg

/// The `sync` command and a host run one sync path (`Updater.sync()`): the same events, `.failed`
/// included, and the same activation notice.
@Suite("One sync path")
struct OneSyncPathTests {
    /// The events of one sync, as text, without the byte counts of progress (their chunking varies).
    final class Events: Sendable {
        private let seen = Mutex<[String]>([])
        var all: [String] { seen.withLock { $0 } }
        var handler: SyncEventHandler {
            { event in
                if case .downloadProgress = event { return }
                self.seen.withLock { $0.append("\(event)") }
            }
        }
    }

    static func repository() throws -> TestRepository {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")])
        try repo.add("docs", "1", routes: ["https://m.example.com/docs/"], files: [SiteFile("index.html", "docs 1")])
        try repo.publish()
        return repo
    }

    /// A host's updater (`Updater(store:)`) and the command's (`Updater(root:)`, which is what `sync`
    /// makes) see the same events for the same two syncs, one activating, one failing for a missing
    /// archive; the failure is reported as `.failed` to both.
    @Test func theCommandAndAHostReportTheSameEvents() async throws {
        let repo = try Self.repository()
        let url = URL(fileURLWithPath: repo.manifestPath)
        let hostRoot = try TemporaryDirectory()
        let commandRoot = try TemporaryDirectory()
        let host = Events()
        let command = Events()
        let store = try PackageStore(root: hostRoot.url, options: .init(watchInterval: 0))
        let hostUpdater = Updater(store: store, manifestURL: url, options: .init(jobs: 1, events: host.handler))
        let commandUpdater = Updater(
            root: try CacheRoot(root: commandRoot.url), manifestURL: url, options: .init(jobs: 1, events: command.handler))

        #expect(try await hostUpdater.sync().outcome == .activated)
        #expect(try await commandUpdater.sync().outcome == .activated)
        #expect(host.all.contains("activated(generation: 1)"))
        #expect(host.all == command.all)

        try repo.add("docs", "2", routes: ["https://m.example.com/docs/"], files: [SiteFile("index.html", "docs 2")])
        try repo.publish()
        try FileManager.default.removeItem(atPath: repo.archivePath("docs"))
        await #expect(throws: OfflinePkgError.self) { try await hostUpdater.sync() }
        await #expect(throws: OfflinePkgError.self) { try await commandUpdater.sync() }
        #expect(host.all.last?.hasPrefix("failed(") == true)
        #expect(host.all == command.all)
    }

    /// A root opened on a reader tells it of a switch before `sync()` returns, with no watcher running
    /// (`watchInterval: 0`); a root opened alone (the command's) has no reader to tell, and one that
    /// polls sees the switch on its own.
    @Test func aSwitchReachesTheRootsReaderAtOnce() async throws {
        let repo = try Self.repository()
        let url = URL(fileURLWithPath: repo.manifestPath)
        let root = try TemporaryDirectory()
        let reader = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        let stream = reader.activations
        let updater = Updater(root: CacheRoot(store: reader), manifestURL: url, options: .init())
        #expect(try await updater.sync().outcome == .activated)
        #expect(reader.activeSet.generation == 1)
        var iterator = stream.makeAsyncIterator()
        #expect(await iterator.next()?.generation == 1)

        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        #expect(try await Updater(root: try CacheRoot(root: root.url), manifestURL: url, options: .init()).sync().outcome == .activated)
        #expect(reader.activeSet.generation == 1)
        try reader.reload()
        #expect(reader.activeSet.generation == 2)
    }
}
