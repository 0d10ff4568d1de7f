import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

@Suite struct ResourceCacheTests {
    /// A root with 20 files of 1 KiB and one of 64 KiB, and a store whose cache holds 8 KiB.
    func install(capacity: Int) async throws -> (TemporaryDirectory, PackageStore) {
        let scratch = try TemporaryDirectory()
        let site = scratch.path("site")
        for number in 0..<20 {
            try writeFile(Data(repeating: UInt8(65 + number), count: 1024), to: site + "/small-\(number).js")
        }
        try writeFile(Data(repeating: 0x5a, count: 64 << 10), to: site + "/big.bin")
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1, packages: [.init(id: "app", version: "1", routes: ["https://app.example.test/"], site: site)])
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, memoryCacheCapacity: capacity))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        return (scratch, store)
    }

    @Test func returnsTheFileBytesAndStaysWithinCapacity() async throws {
        let (scratch, store) = try await install(capacity: 8 << 10)
        _ = scratch
        for number in 0..<20 {
            let (resource, data) = try #require(try store.data(for: "https://app.example.test/small-\(number).js"))
            #expect(data == Data(repeating: UInt8(65 + number), count: 1024))
            #expect(resource.mimeType == "text/javascript; charset=utf-8")
            #expect(store.cache.usage.bytes <= 8 << 10)
        }
        #expect(store.cache.usage.entries == 8)
        // Larger than capacity / 8: served, never cached.
        let (_, big) = try #require(try store.data(for: "https://app.example.test/big.bin"))
        #expect(big.count == 64 << 10)
        #expect(store.cache.usage.entries == 8)
        #expect(try store.data(for: "https://app.example.test/missing.js") == nil)
    }

    @Test func keepsTheRecentlyUsedAndServesFromMemory() async throws {
        let (scratch, store) = try await install(capacity: 8 << 10)
        _ = scratch
        for number in 0..<8 { _ = try store.data(for: "https://app.example.test/small-\(number).js") }
        // Full. Touch 0, then add 8: 1 (now the least recent) goes, 0 stays.
        _ = try store.data(for: "https://app.example.test/small-0.js")
        _ = try store.data(for: "https://app.example.test/small-8.js")
        // Files are read-only; prove 0 is answered from memory by hiding the file it came from.
        let zero = try #require(store.resolve("https://app.example.test/small-0.js"))
        let one = try #require(store.resolve("https://app.example.test/small-1.js"))
        let hidden = zero.path + ".hidden"
        try FileManager.default.setAttributes(
            [.posixPermissions: 0o755], ofItemAtPath: (zero.path as NSString).deletingLastPathComponent)
        try FileManager.default.moveItem(atPath: zero.path, toPath: hidden)
        try FileManager.default.moveItem(atPath: one.path, toPath: one.path + ".hidden")
        #expect(try store.data(for: "https://app.example.test/small-0.js")?.1.count == 1024)
        #expect(throws: OfflinePkgError.self) { try store.data(for: "https://app.example.test/small-1.js") }
    }
}
