import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `StartupPages` takes the pages of files mapped read-only out of the resident set, never a page the
/// process wrote, and an unpack does it once when armed (the CLI's sync arms it).
@Suite("Start-up pages")
struct StartupPagesTests {
    static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// /proc/self/pagemap's entry for the page at `address`: (present, still the file's).
    static func state(of address: UnsafeRawPointer) throws -> (present: Bool, file: Bool) {
        let fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        var entry: UInt64 = 0
        let read = pread(fd, &entry, 8, off_t(UInt(bitPattern: address) / UInt(page) * 8))
        try #require(read == 8)
        return (entry & (1 << 63) != 0, entry & (1 << 61) != 0)
    }

    /// A private mapping of a file whose first page the process wrote before making it read-only, as the
    /// loader does with a relocated page: that page keeps its written bytes, the others are dropped and
    /// read the file's bytes again.
    @Test func aWrittenPageStaysAndTheFilesPagesMapAgain() throws {
        let folder = try TemporaryDirectory(prefix: "startup-pages")
        let path = folder.path + "/file"
        try FileSystem.write((0..<4 * Self.page).map { UInt8($0 / Self.page + 1) }, to: path)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        let mapped = mmap(nil, 4 * Self.page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
        try #require(mapped != MAP_FAILED)
        let base = try #require(mapped)
        defer { munmap(base, 4 * Self.page) }
        base.storeBytes(of: 0xEE, as: UInt8.self)
        #expect(base.load(fromByteOffset: Self.page, as: UInt8.self) == 2)
        #expect(base.load(fromByteOffset: 2 * Self.page, as: UInt8.self) == 3)
        try #require(mprotect(base, 4 * Self.page, PROT_READ) == 0)
        let pages = (0..<4).map { UnsafeRawPointer(base + $0 * Self.page) }
        #expect(try Self.state(of: pages[0]) == (true, false))
        #expect(try Self.state(of: pages[1]) == (true, true) && Self.state(of: pages[2]) == (true, true))

        let dropped = try #require(StartupPages.dropFilePages(UnsafeRawBufferPointer(start: base, count: 4 * Self.page)))
        // Pages 1 and 2, and page 3 when the kernel mapped it around their faults.
        #expect(dropped >= 2 * Self.page && dropped <= 3 * Self.page)
        #expect(try Self.state(of: pages[0]) == (true, false))
        for page in pages.dropFirst() { #expect(try !Self.state(of: page).present) }
        #expect(pages.map { $0.load(as: UInt8.self) } == [0xEE, 2, 3, 4])
    }

    /// Every read-only segment of the test process and its libraries: the pages go, and the code run
    /// next maps again.
    @Test func theProcessRunsOnAfterItsReadOnlyPagesWent() throws {
        let dropped = try #require(StartupPages.dropReadOnlyPages())
        #expect(dropped > 0)
        #expect(SHA256.hash(Array("abc".utf8)).hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    /// An armed unpack drops them before it reads and disarms: the drop is once a process.
    @Test func anArmedUnpackDropsThemOnce() throws {
        let dir = try TemporaryDirectory(prefix: "startup-pages")
        try writeSite([SiteFile("index.html", "home\n")], to: dir.path("site"))
        try run("bsdtar", ["-c", "--zstd", "-f", dir.path("a.tar.zst"), "-C", dir.path("site"), "."]).checked()
        let pages = StartupPages()
        pages.dropBeforeNextUnpack()
        var unpacker = ArchiveUnpacker(limits: .init(), archiveName: "a")
        unpacker.startupPages = pages
        #expect(pages.isArmed)
        let tree = try unpacker.unpack(archivePath: dir.path("a.tar.zst"), into: try dir.makeDirectory("first"))
        #expect(!pages.isArmed)
        #expect(tree.files["index.html"]?.size == 5)
        _ = try unpacker.unpack(archivePath: dir.path("a.tar.zst"), into: try dir.makeDirectory("second"))
        #expect(!pages.isArmed && !StartupPages().isArmed)
    }
}
