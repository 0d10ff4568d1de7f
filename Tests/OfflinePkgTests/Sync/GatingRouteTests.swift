import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Gating and routes")
struct GatingRouteTests {
    @Test func aHeldBackPackageDoesNotKeepARouteTheManifestGaveToAnother() async throws {
        let repo = try TestRepository()
        try repo.add("a", "1", routes: ["https://x.test/a/"], files: [SiteFile("a.html", "a1")])
        try repo.publish()
        let store = try PackageStore(root: try TemporaryDirectory().url, options: .init(watchInterval: 0))
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Updater(store: store, manifestURL: url, options: .init(shellVersion: "1")).sync()
        try repo.add(
            "a", "2", routes: ["https://x.test/other/"], files: [SiteFile("a.html", "a2")], extra: ["minShellVersion": "9"])
        try repo.add("b", "1", routes: ["https://x.test/a/"], files: [SiteFile("b.html", "b1")])
        try repo.publish()
        let report = try await Updater(store: store, manifestURL: url, options: .init(shellVersion: "1")).sync()
        #expect(store.activeSet.packages.map(\.id) == ["b"])
        #expect(store.resolve("https://x.test/a/a.html") == nil)
        #expect(store.resolve("https://x.test/a/b.html")?.packageID == "b")
        #expect(report.heldBack.first?.reason.contains("now belongs to b") == true)
    }
}
