import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A sync on a full disk, through the binary, with the cache root on a small tmpfs: a disk failure is
/// exit 1 naming the errno (`No space left on device`), never 4 (which fleets read as an attack), and
/// what was installed stays active and served. Needs root, to mount.
@Suite("Full disk during a sync", .serialized)
struct FullDiskSyncTests {
    /// A cache root on a mounted tmpfs of `size` bytes (unmounted when the value goes), release 1 of
    /// `home` installed in it, and a repository served over HTTP from outside the small disk.
    final class Device: Sendable {
        let scratch: TemporaryDirectory
        let repo: TestRepository
        let server: FaultServer
        let disk: String
        var root: String { disk + "/root" }
        var manifest: String { server.url("manifest.json").absoluteString }

        init(size: Int) async throws {
            scratch = try TemporaryDirectory(prefix: "offlinepkg-fulldisk")
            disk = try scratch.makeDirectory("disk")
            try run("mount", ["-t", "tmpfs", "-o", "size=\(size / 1024)k", "tmpfs", disk]).checked("mount a tmpfs (needs root)")
            repo = try TestRepository()
            server = try FaultServer(documentRoot: repo.path)
            try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")])
            try repo.publish()
            try await InProcessCLI.run(["sync", manifest, "--root", root, "--quiet"]).checked("first sync")
        }

        deinit {
            server.stop()
            _ = try? run("umount", [disk])
        }

        func sync() async throws -> ProcessResult { await InProcessCLI.run(["sync", manifest, "--root", root, "--quiet"]) }

        func activeJSON() throws -> String { try String(contentsOfFile: root + "/active.json", encoding: .utf8) }

        func served() async throws -> String {
            let lookup = try await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", root]).checked("lookup")
            return try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8)
        }

        /// Fills the disk with a file of its own until `leaving` bytes or fewer are free.
        func fill(leaving: Int64 = 0) throws {
            let fd = open(disk + "/filler", O_WRONLY | O_CREAT | O_APPEND, 0o644)
            try #require(fd >= 0)
            defer { close(fd) }
            let chunk = [UInt8](repeating: 0xAB, count: 16 << 10)
            for _ in 0..<100_000 {
                var info = statvfs()
                statvfs(disk, &info)
                let free = Int64(info.f_bavail) * Int64(info.f_frsize)
                if free <= leaving { return }
                let count = Int(min(Int64(chunk.count), max(4096, free - leaving)))
                if write(fd, chunk, count) <= 0 { return }
            }
        }

        func removeFiller() { unlink(disk + "/filler") }

        /// Expects exit 1 naming the errno, no refusal, release 1 still active and served, staging clean.
        func expectDiskFailure(_ result: ProcessResult, before: String) async throws {
            #expect(result.status == 1, "\(result.stderr)")
            #expect(result.stderr.contains("No space left on device"), "\(result.stderr)")
            #expect(!result.stderr.contains("refused"), "\(result.stderr)")
            #expect(try activeJSON() == before)
            await #expect(try served() == "home 1")
            #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/staging").isEmpty)
        }
    }

    /// Bytes nothing can compress: a tree this size has an archive just as large.
    static func noise(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }

    @Test func aDownloadThatFillsTheDiskExits1AndTheNextSyncResumes() async throws {
        let device = try await Device(size: 4 << 20)
        try device.repo.add(
            "home", "2", routes: ["https://m.example.com/"],
            files: [SiteFile("index.html", "home 2"), SiteFile("big.bin", bytes: Self.noise(1 << 20))],
            extra: ["unpackedSize": (1 << 20) + 6])
        try device.repo.publish()
        // The pre-check passes (2.1 MiB needed, ~4 MiB free); 64 KiB arrive, then the server pauses while the disk fills up.
        device.server.script("/archives/home-2.tar.gz", [.pauseAfter(bytes: 64 << 10, seconds: 3)])
        let before = try device.activeJSON()
        let sync = Task.detached { try await device.sync() }
        let downloads = device.root + "/downloads"
        for _ in 0..<200 {
            let sizes = FileSystem.contents(of: downloads).compactMap { FileSystem.fileSize(downloads + "/" + $0) }
            if sizes.contains(64 << 10) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        try device.fill()
        let result = try await sync.value
        try await device.expectDiskFailure(result, before: before)
        #expect(result.stderr.contains("write \(downloads)/"), "\(result.stderr)")

        // Room again: the next sync resumes the download and activates release 2.
        device.removeFiller()
        try await device.sync().checked("sync after freeing the disk")
        await #expect(try device.served() == "home 2")
    }

    @Test func anUnpackThatFillsTheDiskExits1() async throws {
        let device = try await Device(size: 2 << 20)
        // 3 MiB of zeros pack into a few KiB; the manifest understates the tree, so the pre-check passes.
        try device.repo.add(
            "home", "2", routes: ["https://m.example.com/"],
            files: [SiteFile("index.html", "home 2"), SiteFile("zeros.bin", bytes: [UInt8](repeating: 0, count: 3 << 20))],
            extra: ["unpackedSize": 1000])
        try device.repo.publish()
        let before = try device.activeJSON()
        let result = try await device.sync()
        // The unpacker's write errors are `.io` errors with the errno: a disk failure, never a refusal.
        try await device.expectDiskFailure(result, before: before)
        #expect(try device.activeJSON() == before)
        await #expect(try device.served() == "home 1")
    }

    @Test func thePreCheckCountsTheUnpackedSizeOrTenTimesTheArchive() async throws {
        let device = try await Device(size: 4 << 20)
        let before = try device.activeJSON()
        // 600 KiB of noise: 3x its archive (the old estimate) would fit, 10x does not.
        try device.repo.add(
            "home", "2", routes: ["https://m.example.com/"],
            files: [SiteFile("index.html", "home 2"), SiteFile("big.bin", bytes: Self.noise(600 << 10))])
        try device.repo.publish()
        let guessed = try await device.sync()
        #expect(guessed.status == 1 && guessed.stderr.contains("not enough free space in \(device.root)"), "\(guessed.stderr)")
        #expect(device.server.requests(for: "/archives/home-2.tar.gz").isEmpty, "nothing is downloaded")
        #expect(try device.activeJSON() == before)

        // The manifest knows the tree is 600 KiB: that fits.
        device.repo.edit("home") { $0["unpackedSize"] = 600 << 10 }
        try device.repo.publish()
        try await device.sync().checked("sync with a known unpacked size")
        await #expect(try device.served() == "home 2")

        // And a known size larger than the disk is refused before any download.
        try device.repo.add(
            "home", "3", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 3")],
            extra: ["unpackedSize": 8 << 20])
        try device.repo.publish()
        let known = try await device.sync()
        #expect(known.status == 1 && known.stderr.contains("not enough free space"), "\(known.stderr)")
        #expect(device.server.requests(for: "/archives/home-3.tar.gz").isEmpty)
        await #expect(try device.served() == "home 2")
    }
}
