import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// `FileSystem.read` returns a file's bytes whole, whatever its size beside the chunks it reads in.
@Suite("Reading a whole file")
struct FileReadTests {
    @Test(arguments: [0, 1, 16 << 10, (16 << 10) + 1, 80 << 10, (200 << 10) + 7])
    func readsEveryByte(size: Int) throws {
        let folder = try TemporaryDirectory(prefix: "file-read")
        let path = folder.path + "/file"
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 / 251) }
        try FileSystem.write(bytes, to: path)
        #expect(try FileSystem.read(path) == bytes)
        if size > 0 { #expect(throws: OfflinePkgError.self) { try FileSystem.read(path, limit: size - 1) } }
        #expect(try FileSystem.read(path, limit: size) == bytes)
    }
}
