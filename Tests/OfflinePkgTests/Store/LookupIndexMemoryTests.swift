import Foundation
@testable import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// What an open index costs per installed file: nothing until a file is answered (at most 64 bytes of
/// anonymous memory per file in a long-running reader, and an open that is not O(files)).
@Suite struct LookupIndexMemoryTests {
    /// A root whose active set is one package of `count` files, installed as a lookup table only.
    static func root(files count: Int) throws -> (TemporaryDirectory, CacheLayout, ActiveSet) {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path("root"))
        try layout.prepare()
        var files = [PackagePath: TreeFile]()
        for number in 0..<count {
            files[PackagePath(bytes: "assets/f\(number).js".utf8)] = TreeFile(sha256: String(repeating: "0", count: 64), size: 1)
        }
        let tree = String(repeating: "ab", count: 32)
        let table = layout.treeLookup(id: "app", version: "1", treeHash: tree)
        try FileSystem.makeDirectories((table as NSString).deletingLastPathComponent)
        try Data(TreeLookupTable.encode(files)).write(to: URL(fileURLWithPath: table))
        let package = try JSONDecoder().decode(
            InstalledPackage.self,
            from: Data(
                #"{"id": "app", "version": "1", "tree": "\#(tree)", "routes": ["https://app.example.test/"], "entry": "index.html"}"#
                    .utf8))
        return (scratch, layout, ActiveSet(generation: 1, sequence: 1, activatedAt: Date(), packages: [package]))
    }

    @Test func openingTouchesNoMemoryPerFileAndAnAnswerOnePage() throws {
        // 32,768 files: 256 KiB of answer slots, 64 pages. Filling them at open (as the index did)
        // made every page resident; zero pages from the kernel stay out until a file is answered.
        let (scratch, layout, set) = try Self.root(files: 32_768)
        defer { withExtendedLifetime(scratch) {} }
        let index = try LookupIndex(set: set, layout: layout)
        #expect(index.answerSlots.count == 1)
        #expect(index.answerSlots[0].answered == 0)
        #expect(index.answerSlots[0].residentPages == 0, "pages of answer slots resident right after open")
        let first = try #require(index.resolve("https://app.example.test/assets/f12345.js"))
        #expect(first.path.hasSuffix("/assets/f12345.js") && first.size == 1)
        #expect(index.resolve("https://app.example.test/assets/f12345.js") == first)
        #expect(index.resolve("https://app.example.test/assets/nope.js") == nil)
        #expect(index.answerSlots[0].answered == 1)
        #expect(index.answerSlots[0].residentPages == 1, "one answered file, one page")
    }

    @Test func answersStayTheSameObjectsAcrossManyFiles() throws {
        let (scratch, layout, set) = try Self.root(files: 3_000)
        defer { withExtendedLifetime(scratch) {} }
        let index = try LookupIndex(set: set, layout: layout)
        let urls = (0..<3_000).map { "https://app.example.test/assets/f\($0).js" }
        let first = urls.map { index.resolve($0) }
        #expect(first.allSatisfy { $0 != nil })
        for (url, answer) in zip(urls, first) { #expect(index.resolve(url) == answer) }
        #expect(index.answerSlots[0].answered == 3_000)
    }
}
