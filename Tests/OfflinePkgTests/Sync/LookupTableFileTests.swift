import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The memory-mapped lookup table of a tree (`<tree>.lookup`): a tree without one (installed by an
/// older build) or with a damaged one answers from its `.index` listing; `verify` names a table that
/// disagrees with the index, and `--repair` writes it again.
@Suite("Lookup tables")
struct LookupTableFileTests {
    /// The repository comes back too: it is deleted with its last reference, and a repair fetches from it.
    static func installed() async throws -> (TemporaryDirectory, PackageStore, String, TestRepository) {
        let repo = try LifecycleTests.repo(["home": "1", "docs": "1"])
        let root = try TemporaryDirectory()
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath)).sync()
        let docs = try #require(store.activeSet.package("docs"))
        return (root, store, store.layout.treeLookup(id: "docs", version: "1", treeHash: docs.tree), repo)
    }

    @Test(arguments: ["missing", "garbage", "truncated"])
    func aTreeWithoutAUsableTableAnswersFromItsIndex(_ damage: String) async throws {
        let (root, _, table, repo) = try await Self.installed()
        defer { withExtendedLifetime(repo) {} }
        #expect(FileManager.default.fileExists(atPath: table))
        let bytes = try Data(contentsOf: URL(fileURLWithPath: table))
        try FileManager.default.removeItem(atPath: table)
        switch damage {
        case "garbage": try Data(repeating: 0x5a, count: bytes.count).write(to: URL(fileURLWithPath: table))
        case "truncated": try bytes.prefix(40).write(to: URL(fileURLWithPath: table))
        default: break
        }
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        #expect(try LifecycleTests.served(store, "https://m.example.com/docs/") == "docs 1")
        #expect(try LifecycleTests.served(store) == "home 1")
    }

    @Test func verifyNamesATableThatDisagreesWithItsIndexAndRepairRewritesIt() async throws {
        let (root, store, table, repo) = try await Self.installed()
        defer { withExtendedLifetime(repo) {} }
        // A well-formed table of other content: it answers the wrong size and hash for index.html.
        let other = TreeLookupTable.encode(["index.html": TreeFile(sha256: String(repeating: "0", count: 64), size: 1)])
        try FileManager.default.removeItem(atPath: table)
        try Data(other).write(to: URL(fileURLWithPath: table))
        let damage = try store.writer.verify()
        #expect(damage.map(\.packageID) == ["docs"])
        #expect(damage.first?.problem.contains("lookup table") == true)
        #expect(try await TreeRepairer(root: store.writer).repair(damage) == ["docs"])
        #expect(try store.writer.verify().isEmpty)
        let reopened = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        #expect(reopened.resolve("https://m.example.com/docs/")?.size == Int64("docs 1".utf8.count))
    }

    /// Tables on disk hold the hash of each path, so its value is a file format: a key's last bytes
    /// read in one word must hash as they did byte by byte (`byteByByte` is the hash the tables of
    /// earlier builds were written with).
    @Test func theHashOfAKeyIsTheOneEarlierBuildsWrote() {
        func littleEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
            bytes.enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << UInt64(8 * $1.offset) }
        }
        func byteByByte(_ bytes: [UInt8]) -> UInt64 {
            let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15
            func mix(_ value: UInt64, _ with: UInt64) -> UInt64 {
                let product = (value ^ with).multipliedFullWidth(by: multiplier ^ 0xA076_1D64_78BD_642F)
                return product.high ^ product.low
            }
            var state = multiplier ^ UInt64(bytes.count)
            var offset = 0
            while offset + 8 <= bytes.count {
                state = mix(state, littleEndian(bytes[offset..<offset + 8]))
                offset += 8
            }
            if offset < bytes.count {
                state = mix(state, littleEndian(bytes[offset...]))
            }
            return mix(state, multiplier)
        }
        let text = Array("assets/section-12/group-3/file-0042.js?é\u{0}\u{ff}".utf8)
        for length in 0...text.count {
            let key = Array(text.prefix(length))
            // At the start of a buffer and one byte in, so a word read before the key would show.
            let shifted = [0xAA] + key
            #expect(key.withUnsafeBytes { ByteKeyTable.hash($0) } == byteByByte(key), "length \(length)")
            #expect(shifted.withUnsafeBytes { ByteKeyTable.hash(UnsafeRawBufferPointer(rebasing: $0[1...])) } == byteByByte(key))
        }
    }
}
