import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Shared downloads")
struct SharedDownloadTests {
    static func entry(_ id: String, archive: String, deltas: [String] = []) -> PackageEntry {
        func file(_ sha: String) -> RemoteFile { RemoteFile(url: "a", sha256: String(repeating: sha, count: 64), size: 1) }
        return PackageEntry(
            id: id, version: "1", routes: ["https://m.example.com/\(id)/"], archive: file(archive),
            tree: String(repeating: "0", count: 64), deltas: deltas.map { Delta(from: "0", file: file($0)) })
    }

    @Test func entriesSharingAnArchiveOrADeltaInstallInOneGroup() {
        let groups = SyncEngine.groupsSharingDownloads([
            Self.entry("a", archive: "1", deltas: ["7"]),
            Self.entry("b", archive: "2"),
            Self.entry("c", archive: "3", deltas: ["7"]),  // shares a's delta
            Self.entry("d", archive: "2"),  // shares b's archive
            Self.entry("e", archive: "4", deltas: ["3", "2"]),  // joins c's group and b's group into one
            Self.entry("f", archive: "5"),
        ])
        #expect(groups.map { $0.map(\.id) } == [["a", "c", "b", "d", "e"], ["f"]])
    }
}
