import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The device ID that rollout buckets hash (docs/protocol.md#who-takes-a-release): a random UUID made once per cache root.
@Suite("Device ID")
struct DeviceIDTests {
    @Test func theDeviceIDIsMadeAtTheFirstSyncAndKept() async throws {
        let repo = try LifecycleTests.repo()
        let root = try TemporaryDirectory()
        let file = root.path("device-id")
        let url = URL(fileURLWithPath: repo.manifestPath)
        let store = try LifecycleTests.store(root)
        #expect(!FileManager.default.fileExists(atPath: file))
        _ = try await LifecycleTests.sync(store, url)
        let first = try String(contentsOfFile: file, encoding: .utf8)
        let id = first.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(UUID(uuidString: id) != nil, "device-id holds \(first)")
        #expect(try store.status().deviceID == id)
        // A new release (planned again), the same manifest again, and a fresh store of the same root.
        try repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 2")])
        try repo.publish()
        #expect(try await LifecycleTests.sync(store, url).outcome == .activated)
        _ = try await LifecycleTests.sync(try LifecycleTests.store(root), url)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == first)
    }
}
