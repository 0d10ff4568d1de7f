import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("File index")
struct FileIndexTests {
    static let shaA = String(repeating: "a", count: 64)
    static let shaB = String(repeating: "b", count: 64)

    /// An index entry as JSON text, fields in the given order.
    static func entry(_ path: String, offset: Int, length: Int, size: Int = 10, sha: String = shaA) -> String {
        "{\"path\":\"\(path)\",\"sha256\":\"\(sha)\",\"size\":\(size),\"offset\":\(offset),\"length\":\(length)}"
    }

    static func decode(_ entries: [String], archiveSize: Int64 = 1000) throws -> FileIndex {
        try FileIndex.decode(json: Array("[\(entries.joined(separator: ","))]".utf8), archiveSize: archiveSize, source: "files/x.json.zst")
    }

    /// The error's field and reason, or nil when `body` did not throw an `invalidFileIndex`.
    static func failure(_ body: () throws -> FileIndex) -> (field: String, reason: String)? {
        do {
            _ = try body()
            return nil
        } catch OfflinePkgError.invalidFileIndex(let source, let field, let reason) {
            #expect(source == "files/x.json.zst")
            return (field, reason)
        } catch {
            Issue.record("unexpected error \(error)")
            return nil
        }
    }

    @Test func decodesAGoodIndexAndEncodesItBackToTheSameEntries() throws {
        let index = try Self.decode([
            Self.entry("a/b.js", offset: 0, length: 100),
            Self.entry("a/c d é.css", offset: 100, length: 50, size: 0, sha: Self.shaB),
            Self.entry("index.html", offset: 200, length: 800, size: 123),
        ])
        #expect(index.entries.map(\.path) == ["a/b.js", "a/c d é.css", "index.html"])
        #expect(index.entries[1] == FileIndex.Entry(path: "a/c d é.css", sha256: Self.shaB, size: 0, offset: 100, length: 50))
        #expect(index.entries[2].offset + index.entries[2].length == 1000)
        let encoded = index.encode()
        #expect(try FileIndex.decode(json: encoded, archiveSize: 1000, source: "files/x.json.zst") == index)
        // The same entries always give the same bytes: the file is named by their hash.
        #expect(FileIndex(entries: index.entries).encode() == encoded)
        #expect(try FileIndex.decode(json: Array("[]".utf8), archiveSize: 0, source: "e").entries.isEmpty)
    }

    @Test func encodesQuotesAndBackslashesAsJSONEscapes() throws {
        let index = FileIndex(entries: [FileIndex.Entry(path: "say \"hi\".txt", sha256: Self.shaA, size: 1, offset: 0, length: 5)])
        let text = String(decoding: index.encode(), as: UTF8.self)
        #expect(text.contains(#""path":"say \"hi\".txt""#))
        #expect(try FileIndex.decode(json: index.encode(), archiveSize: 5, source: "q") == index)
    }

    @Test func refusesADuplicatePath() {
        let failure = Self.failure {
            try Self.decode([Self.entry("a.js", offset: 0, length: 10), Self.entry("a.js", offset: 10, length: 10)])
        }
        #expect(failure?.field == "[1].path")
        #expect(failure?.reason == "duplicate path \"a.js\"")
    }

    @Test func refusesARangeOutsideTheArchive() {
        let failure = Self.failure { try Self.decode([Self.entry("a.js", offset: 990, length: 11)]) }
        #expect(failure?.field == "[0]")
        #expect(failure?.reason == "\"a.js\": range 990+11 ends past the archive's 1000 bytes")
        let huge = Self.failure { try Self.decode([Self.entry("a.js", offset: Int.max, length: Int.max)]) }
        #expect(huge?.reason.contains("ends past the archive") == true)
    }

    @Test func refusesOverlappingRanges() {
        let failure = Self.failure {
            try Self.decode([
                Self.entry("a.js", offset: 500, length: 100), Self.entry("b.js", offset: 0, length: 100),
                Self.entry("c.js", offset: 599, length: 10),
            ])
        }
        #expect(failure?.field == "[2]")
        #expect(failure?.reason == "\"c.js\": range 599+10 overlaps the range 500+100 of \"a.js\"")
    }

    @Test func refusesAnUnsortedIndex() {
        // Byte order, not String order: "B" (0x42) sorts before "a" (0x61), and "a-b" before "a/b".
        #expect(throws: Never.self) {
            try Self.decode([
                Self.entry("B.js", offset: 0, length: 1), Self.entry("a-b", offset: 1, length: 1),
                Self.entry("a/b", offset: 2, length: 1),
            ])
        }
        let failure = Self.failure {
            try Self.decode([Self.entry("b.js", offset: 0, length: 10), Self.entry("a.js", offset: 10, length: 10)])
        }
        #expect(failure?.field == "[1].path")
        #expect(failure?.reason == "\"a.js\" comes after \"b.js\": not sorted by path bytes")
    }

    @Test(arguments: [
        ("../etc/passwd", "\"..\" segment in path"), ("/abs", "absolute path"), ("a\\\\b", "backslash in path"),
        ("a//b", "empty segment in path"), ("./a", "not in normal form"), ("a\\u0001b", "control character in path"),
        ("a\\u0000b", "NUL byte in path"), ("a\\u0085b", "control character in path"), ("", "empty path"),
    ])
    func refusesBadPathBytes(_ path: String, _ problem: String) {
        let failure = Self.failure { try Self.decode([Self.entry(path, offset: 0, length: 10)]) }
        #expect(failure?.field == "[0].path")
        #expect(failure?.reason.hasSuffix(": " + problem) == true, "\(String(describing: failure))")
    }

    @Test func refusesAPathThatIsBothAFileAndAFolder() {
        let failure = Self.failure {
            try Self.decode([
                Self.entry("a", offset: 0, length: 1), Self.entry("a-b", offset: 1, length: 1), Self.entry("a/b", offset: 2, length: 1),
            ])
        }
        #expect(failure?.field == "[2].path")
        #expect(failure?.reason == "\"a/b\" is inside \"a\", which is a file")
    }

    @Test(arguments: [
        (#"{"a":1}"#, "(document)", "expected a JSON list"),
        (#"[{"path":"a","sha256":"A"}]"#, "[0].sha256", "expected 64 lowercase hex digits"),
        (#"[{"path":"a","sha256":"\#(shaA)","size":1.0,"offset":0,"length":1}]"#, "[0].size", "expected an integer"),
        (#"[{"path":"a","sha256":"\#(shaA)","size":1,"offset":-1,"length":1}]"#, "[0].offset", "must be at least 0, got -1"),
        (#"[{"path":"a","sha256":"\#(shaA)","size":1,"offset":0,"length":0}]"#, "[0].length", "must be at least 1, got 0"),
        (#"[{"path":"a","path":"b"}]"#, "[0]", "duplicate key \"path\""),
        (#"[{"path":7}]"#, "[0].path", "expected a string"),
        (#"[{"path":".offlinepkg-delta.json","sha256":"\#(shaA)","size":1,"offset":0,"length":1}]"#, "[0].path",
            "\".offlinepkg-delta.json\" is reserved for deltas"),
    ])
    func refusesMalformedJSON(_ json: String, _ field: String, _ reason: String) {
        let failure = Self.failure { try FileIndex.decode(json: Array(json.utf8), archiveSize: 100, source: "files/x.json.zst") }
        #expect(failure?.field == field)
        #expect(failure?.reason == reason)
    }

    @Test func decompressesAZstdFileThroughLibarchive() throws {
        let directory = try TemporaryDirectory()
        let index = FileIndex(entries: [FileIndex.Entry(path: "index.html", sha256: Self.shaA, size: 3, offset: 0, length: 9)])
        let plain = try directory.write(index.encode(), to: "index.json")
        try run("zstd", ["-q", "-19", plain, "-o", directory.path("index.json.zst")]).checked("zstd")
        let compressed = try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory.path("index.json.zst"))))
        #expect(try FileIndex.decompress(compressed, source: "files/x.json.zst") == index.encode())

        // Not compressed at all: libarchive's raw format would pass it through; the index refuses it.
        let uncompressed = Self.failure {
            try FileIndex.decode(json: FileIndex.decompress(index.encode(), source: "files/x.json.zst"), archiveSize: 9, source: "files/x.json.zst")
        }
        #expect(uncompressed?.reason == "expected zstd-compressed JSON, got none")
        let truncated = Self.failure {
            try FileIndex.decode(json: FileIndex.decompress(Array(compressed.dropLast(4)), source: "files/x.json.zst"), archiveSize: 9, source: "files/x.json.zst")
        }
        #expect(truncated?.reason.contains("Truncated zstd input") == true, "\(String(describing: truncated))")
        let small = Self.failure {
            try FileIndex.decode(
                json: FileIndex.decompress(compressed, source: "files/x.json.zst", maximumSize: 10), archiveSize: 9, source: "files/x.json.zst")
        }
        #expect(small?.reason == "decompresses to more than 10 bytes")
    }
}
