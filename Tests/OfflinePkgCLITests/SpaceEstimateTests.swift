import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Free-space estimate")
struct SpaceEstimateTests {
    static func entry(archive: Int64, unpacked: Int64? = nil) -> PackageEntry {
        PackageEntry(
            id: "p", version: "1", routes: ["https://m.example.com/"],
            archive: RemoteFile(url: "a", sha256: String(repeating: "0", count: 64), size: archive),
            tree: String(repeating: "0", count: 64), unpackedSize: unpacked)
    }

    @Test func knownSizesGuessesAndCaps() {
        let limits = UnpackLimits(maxEntries: 10, maxBytes: 1 << 30)
        #expect(SpaceEstimate.needed(for: [Self.entry(archive: 1000)], limits: limits) == 11_000)
        #expect(SpaceEstimate.needed(for: [Self.entry(archive: 1000, unpacked: 1600)], limits: limits) == 1000 + 1700)
        // The unpack byte limit caps the tree, and a hostile size cannot wrap the sum round.
        #expect(SpaceEstimate.needed(for: [Self.entry(archive: 1 << 28)], limits: limits) == (1 << 28) + (1 << 30))
        #expect(SpaceEstimate.needed(for: [Self.entry(archive: .max), Self.entry(archive: .max)], limits: limits) == .max)
    }
}
