import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// docs/protocol.md#switching: a sync ends by removing the trees no set needs. Only the active set and the one before it
/// (for `rollback`) stay on disk, with no explicit `gc` in between.
@Suite("Collection after a sync")
struct SyncCollectionTests {
    /// The entries of `trees/<id>` in `root`: tree folders and their `.index`/`.lookup` companions.
    static func entries(_ root: TemporaryDirectory, _ id: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root.path("trees/\(id)"))) ?? []).sorted()
    }

    /// The versions whose tree folders are in `trees/<id>` (a tree folder is named `<version>-<hash prefix>`).
    static func installedVersions(_ root: TemporaryDirectory, _ id: String) -> [String] {
        entries(root, id).filter { !$0.hasSuffix(".index") && !$0.hasSuffix(".lookup") }
            .map { String($0[..<$0.lastIndex(of: "-")!]) }.sorted()
    }

    @Test func eachSyncLeavesOnlyTheActiveAndThePreviousTrees() async throws {
        let repo = try TestRepository()
        let root = try TemporaryDirectory(prefix: "offlinepkg-collect")
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        let url = URL(fileURLWithPath: repo.manifestPath)
        for version in 1...5 {
            try repo.add(
                "home", "\(version)", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home \(version)")])
            // docs is in releases 1 and 2 only: after release 3 only the previous set needs it, after 4 none.
            if version == 1 {
                try repo.add("docs", "1", routes: ["https://m.example.com/docs/"], files: [SiteFile("index.html", "docs")])
            }
            if version == 3 { repo.remove("docs") }
            try repo.publish()
            let report = try await Updater(store: store, manifestURL: url).sync()
            #expect(report.outcome == .activated)
            #expect(try store.resolve("https://m.example.com/").map { try String(contentsOfFile: $0.path, encoding: .utf8) } == "home \(version)")

            let expected = version == 1 ? ["1"] : ["\(version - 1)", "\(version)"]
            #expect(Self.installedVersions(root, "home") == expected, "after the sync of release \(version)")
            // A removed tree takes its index and lookup table with it: nothing else is left in the folder.
            let left = Self.entries(root, "home").filter { entry in !expected.contains { entry.hasPrefix("\($0)-") } }
            #expect(left.isEmpty, "after the sync of release \(version): \(left)")
            #expect(Self.installedVersions(root, "docs") == (version <= 3 ? ["1"] : []), "after the sync of release \(version)")
            // Nothing of the finished downloads stays either.
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: root.path("downloads"))) ?? []).isEmpty)
        }
        // What was kept is enough to go back one release.
        _ = try store.writer.rollback()
        #expect(try store.resolve("https://m.example.com/").map { try String(contentsOfFile: $0.path, encoding: .utf8) } == "home 4")
    }
}
