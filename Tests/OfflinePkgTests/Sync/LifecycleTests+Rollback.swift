import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// A rollback never leads back to the release it left.
extension LifecycleTests {
    /// A set a rollback restored is not reverted for want of a launch confirmation: the set before it is
    /// the release rolled back from, which the revert would bring back.
    @Test func aSetRestoredByARollbackIsNeverRevertedToTheReleaseItLeft() async throws {
        let (_, root) = try await Self.syncedTwoReleases()
        try Self.writer(root, launches: 2).rollback()
        for _ in 0..<4 { #expect(try Self.writer(root, launches: 2).recordLaunch() == .confirmed) }
        let store = try Self.store(root)
        #expect(try Self.served(store) == "home 1")
        #expect(throws: OfflinePkgError.self) { try CacheRoot(store: store).rollback() }
        #expect(try Self.served(try Self.store(root)) == "home 1")
    }
}
