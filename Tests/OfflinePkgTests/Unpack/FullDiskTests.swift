import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// A full disk while unpacking is a disk failure (exit 1, with the errno's text), never a refused
/// archive (exit 4, which fleets read as an attack). The disk is a 2 MiB tmpfs, mounted as root.
@Suite("Full disk while unpacking", .serialized)
struct FullDiskTests {
    /// A mounted 2 MiB tmpfs, unmounted when the value goes.
    final class SmallDisk {
        let dir: TemporaryDirectory
        let path: String

        init() throws {
            dir = try TemporaryDirectory()
            path = try dir.makeDirectory("disk")
            try run("mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", path]).checked("mount a 2 MiB tmpfs (needs root)")
        }

        deinit { _ = try? run("umount", ["-l", path]) }
    }

    @Test func theUnpackerReportsTheErrnoAsAnIOError() async throws {
        let disk = try SmallDisk()
        let archive = try ArchiveDamageTests.zeros(4 << 20, in: disk.dir)
        let staging = disk.path + "/staging"
        #expect(mkdir(staging, 0o755) == 0)
        #expect {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: archive, into: staging)
        } throws: { error in
            guard case .io(let path, "write", let errno) = error as? OfflinePkgError else { return false }
            return path == staging + "/zeros" && errno == Errno(ENOSPC)
                && "\(error)" == "write \(staging)/zeros: No space left on device"
                && (error as! OfflinePkgError).category == .failure
        }
    }

    @Test func syncExitsOneNamingTheErrnoAndCleansStaging() async throws {
        let disk = try SmallDisk()
        let archive = try ArchiveDamageTests.zeros(4 << 20, in: disk.dir)
        let repo = try disk.dir.makeDirectory("repo")
        let entry = try makeManifestEntry(
            id: "p", version: "1", routes: ["https://m.example.com/"], archivePath: archive, archiveURL: "file://" + archive,
            tree: String(repeating: "0", count: 64))
        try writeManifest(packages: [entry], sequence: 1, to: repo + "/manifest.json")
        let root = disk.path + "/root"
        let result = await InProcessCLI.run(["sync", "file://\(repo)/manifest.json", "--root", root, "--quiet"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("No space left on device"), "\(result.stderr)")
        #expect(!result.stderr.contains("refused"), "\(result.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/staging") == [])
    }
}
