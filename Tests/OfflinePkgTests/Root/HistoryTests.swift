import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The root's history is bounded, rewritten atomically, and never silently lost.
@Suite("Bounded history")
struct HistoryTests {
    static func publish(_ repo: TestRepository, _ version: Int) throws {
        try repo.add("home", "\(version)", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home \(version)")])
        try repo.publish()
    }

    @Test func keepsTheLastNActivationsOldestFirst() async throws {
        let repo = try TestRepository()
        let root = try TemporaryDirectory()
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        var options = Updater.Options()
        options.historyLimit = 3
        for version in 1...5 {
            try Self.publish(repo, version)
            let report = try await Updater(store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath), options: options)
                .sync()
            #expect(report.outcome == .activated)
        }
        let status = try store.status()
        #expect(status.history.map(\.generation) == [3, 4, 5])
        #expect(status.history.map { $0.packages.map(\.version) } == [["3"], ["4"], ["5"]])
        #expect(status.historyProblem == nil)
        // One JSON document, not a growing log.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: root.path("history.json")))
        #expect(try JSONSerialization.jsonObject(with: bytes) is [Any])
        #expect(!FileManager.default.fileExists(atPath: root.path("history.jsonl")))
    }

    @Test func anOlderRootsLogIsCarriedOverAndRemoved() async throws {
        let repo = try TestRepository()
        try Self.publish(repo, 1)
        let root = try TemporaryDirectory()
        let layout = CacheLayout(root: root.path)
        try layout.prepare()
        // Two lines as builds before the bounded history wrote them: whole active sets, one per line.
        var legacy = [UInt8]()
        for generation in [7, 8] {
            let set = ActiveSet(generation: generation, sequence: generation, activatedAt: Date(), packages: [])
            legacy += JSONCoding.encode(set, pretty: false) + [0x0a]
        }
        try Data(legacy).write(to: URL(fileURLWithPath: layout.legacyHistory))
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        #expect(try store.status().history.map(\.generation) == [7, 8])
        _ = try await Updater(store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath)).sync()
        #expect(try store.status().history.map(\.generation) == [7, 8, 1])
        #expect(!FileManager.default.fileExists(atPath: layout.legacyHistory))
    }

    @Test func anUnreadableHistoryIsReportedNotHidden() throws {
        let root = try TemporaryDirectory()
        let layout = CacheLayout(root: root.path)
        try layout.prepare()
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: layout.history))
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        let status = try store.status()
        #expect(status.history.isEmpty)
        let problem = try #require(status.historyProblem)
        #expect(problem.contains("history.json is unreadable"))
    }

    /// Past `History.maximumFileSize` the history is reported, not read: every `status` and activation
    /// would otherwise read and parse it whole. The file here is a valid document padded with JSON
    /// whitespace, so only the size refuses it. The installed set stays, and the next activation starts
    /// the history again.
    @Test func anOversizedHistoryIsReportedAndStartedAgainWithNothingInstalledLost() async throws {
        let repo = try TestRepository()
        try Self.publish(repo, 1)
        let root = try TemporaryDirectory()
        let layout = CacheLayout(root: root.path)
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath)).sync()
        let written = try FileSystem.read(layout.history)
        #expect(written.first == UInt8(ascii: "["))
        let padded = [UInt8(ascii: "[")] + [UInt8](repeating: 0x20, count: History.maximumFileSize) + written.dropFirst()
        try Data(padded).write(to: URL(fileURLWithPath: layout.history))

        let status = try store.status()
        #expect(status.history.isEmpty)
        let problem = try #require(status.historyProblem)
        #expect(problem.contains(layout.history) && problem.contains("larger than the limit of \(History.maximumFileSize) bytes"))
        #expect(status.active.packages.map(\.version) == ["1"])

        try Self.publish(repo, 2)
        let report = try await Updater(store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath)).sync()
        #expect(report.outcome == .activated)
        let after = try store.status()
        #expect(after.historyProblem == nil)
        #expect(after.history.map(\.generation) == [2])
        #expect(after.active.packages.map(\.version) == ["2"])
        #expect(FileSystem.fileSize(layout.history)! < 4096)
    }

    /// The append-only log of older builds is held to the same size: reported, its entries left out.
    @Test func anOversizedOlderLogIsReportedNotRead() throws {
        let root = try TemporaryDirectory()
        let layout = CacheLayout(root: root.path)
        try layout.prepare()
        let set = ActiveSet(generation: 7, sequence: 7, activatedAt: Date(), packages: [])
        let line = JSONCoding.encode(set, pretty: false) + [0x0a]
        let padded = [UInt8](repeating: 0x0a, count: History.maximumFileSize) + line
        try Data(padded).write(to: URL(fileURLWithPath: layout.legacyHistory))
        let status = try PackageStore(root: root.url, options: .init(watchInterval: 0)).status()
        #expect(status.history.isEmpty)
        let problem = try #require(status.historyProblem)
        #expect(problem.contains(layout.legacyHistory) && problem.contains("larger than \(History.maximumFileSize) bytes"))
    }
}
