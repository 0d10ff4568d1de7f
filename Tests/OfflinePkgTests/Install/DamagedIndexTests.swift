import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Damaged index")
struct DamagedIndexTests {
    @Test func aMissingIndexCostsOnlyItsPackageAndRepairMendsIt() async throws {
        let repo = try LifecycleTests.repo(["home": "1", "docs": "1"])
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        let syncer = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        _ = try await Updater(store: syncer, manifestURL: url).sync()
        let docs = try #require(syncer.activeSet.package("docs"))
        try FileManager.default.removeItem(atPath: syncer.layout.treeIndex(id: "docs", version: "1", treeHash: docs.tree))
        try FileManager.default.removeItem(atPath: syncer.layout.treeLookup(id: "docs", version: "1", treeHash: docs.tree))
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        #expect(try LifecycleTests.served(store) == "home 1")
        #expect(store.resolve("https://m.example.com/docs/") == nil)
        let damage = try store.writer.verify()
        #expect(damage.map(\.packageID) == ["docs"] && damage[0].problem.contains("tree index is unreadable"))
        #expect(try await TreeRepairer(root: store.writer).repair(damage) == ["docs"])
        #expect(try store.writer.verify().isEmpty)
        #expect(
            try LifecycleTests.served(
                try PackageStore(root: root.url, options: .init(watchInterval: 0)), "https://m.example.com/docs/") == "docs 1")
    }
}
