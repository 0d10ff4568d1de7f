import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// A rollback never leads back to the release it left.
extension LifecycleTests {
    /// A set a rollback restored is not reverted for want of a launch confirmation: the set before it is
    /// the release rolled back from, which the revert would bring back.
    @Test func aSetRestoredByARollbackIsNeverRevertedToTheReleaseItLeft() async throws {
        let repo = try Self.repo()
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Self.sync(try Self.store(root), url)
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        _ = try await Self.sync(try Self.store(root), url)
        try Self.writer(root, launches: 2).rollback()
        for _ in 0..<4 { #expect(try Self.writer(root, launches: 2).recordLaunch() == .confirmed) }
        let store = try Self.store(root)
        #expect(try Self.served(store) == "home 1")
        #expect(throws: OfflinePkgError.self) { try CacheRoot(store: store).rollback() }
        #expect(try Self.served(try Self.store(root)) == "home 1")
    }
}
