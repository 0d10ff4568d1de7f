import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// Damaged archives that libarchive reads with a warning, data that runs past what its header declares,
/// sparse members, and the bounds of one unpack (deadline, memory): every one is refused, exit 4.
@Suite("Damaged archives")
struct ArchiveDamageTests {
    static func refusal(_ archive: String, limits: UnpackLimits = .init(), in dir: TemporaryDirectory) throws -> String? {
        let staging = try dir.makeDirectory("staging-\(UUID().uuidString)")
        do {
            _ = try ArchiveUnpacker(limits: limits, archiveName: "a").unpack(archivePath: archive, into: staging)
            return nil
        } catch let error as OfflinePkgError {
            guard case .archiveRefused(_, _, let reason) = error else { return "not refused: \(error)" }
            return reason
        }
    }

    static func zip(_ files: [SiteFile], store: Bool, in dir: TemporaryDirectory) throws -> [UInt8] {
        try writeSite(files, to: dir.path("zip-site"))
        let zip = dir.path("site.zip")
        let options = store ? ["--options", "zip:compression=store"] : []
        try run("bsdtar", ["--format", "zip"] + options + ["-cf", zip, "-C", dir.path("zip-site")] + files.map(\.path)).checked()
        return try FileSystem.read(zip)
    }

    @Test(arguments: [true, false])
    func refusesAZipWithADamagedCRC(store: Bool) throws {
        let dir = try TemporaryDirectory()
        var bytes = try Self.zip([SiteFile("f.txt", String(repeating: "hello zip\n", count: 50))], store: store, in: dir)
        if store {
            bytes[ZipSurgery.firstDataOffset(in: bytes) + 3] ^= 0x20
        } else {
            // Damage the CRC fields themselves: the data still inflates, only the check fails.
            for offset in ZipSurgery.offsets(of: ZipSurgery.local, in: bytes) { bytes[offset + 14] ^= 0xff }
            for offset in ZipSurgery.offsets(of: ZipSurgery.central, in: bytes) { bytes[offset + 16] ^= 0xff }
        }
        let archive = try dir.write(bytes, to: "crc.zip")
        HostileCorpus.keep(archive, as: "damaged-crc-\(store ? "stored" : "deflated").zip")
        let reason = try Self.refusal(archive, in: dir)
        #expect(reason?.contains("damaged") == true, "\(reason ?? "accepted")")
    }

    /// A zip declaring 100 bytes whose data holds 1 MiB (such a zip once installed its whole data).
    @Test(arguments: [true, false])
    func refusesAZipWhoseDataRunsPastItsDeclaredSize(store: Bool) throws {
        let dir = try TemporaryDirectory()
        let big = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        var bytes = try Self.zip([SiteFile("big.bin", bytes: big)], store: store, in: dir)
        ZipSurgery.declareUncompressedSize(100, in: &bytes)
        let archive = try dir.write(bytes, to: "oversize.zip")
        HostileCorpus.keep(archive, as: "oversize-\(store ? "stored" : "deflated").zip")
        let reason = try Self.refusal(archive, in: dir)
        #expect(reason == "more data than the 100 bytes its header declares", "\(reason ?? "accepted")")
    }

    /// A pax record whose length does not match (libarchive: "Ignoring malformed pax extended attribute").
    @Test(arguments: ["tar", "tar.gz"])
    func refusesAMalformedPaxAttribute(format: String) throws {
        let dir = try TemporaryDirectory()
        var tar = TarBuilder()
        tar.pax(body: Array("99 comment=short\n".utf8))
        tar.entry("f", data: Array("x".utf8))
        let archive = try ArchiveLinkTests.compress(tar.finished(), format: format, in: dir)
        HostileCorpus.keep(archive, as: "malformed-pax.\(format)")
        let reason = try Self.refusal(archive, in: dir)
        #expect(reason?.contains("damaged header") == true, "\(reason ?? "accepted")")
    }

    /// Sparse members, from stock tar programs reading files that `truncate` left with holes (bsdtar's pax
    /// form, GNU tar's old GNU and pax 1.0 forms), and a hand-made pax 1.0 member whose hole trails its data.
    @Test(arguments: ["bsdtar pax", "gnu tar gnu", "gnu tar posix", "hand-made pax 1.0"])
    func refusesSparseMembersWhereverTheirHolesAre(form: String) throws {
        let dir = try TemporaryDirectory()
        let archive: String
        if form == "hand-made pax 1.0" {
            var tar = TarBuilder()
            tar.pax([
                ("GNU.sparse.major", "1"), ("GNU.sparse.minor", "0"), ("GNU.sparse.name", "sparse"),
                ("GNU.sparse.realsize", "1048576"),
            ])
            let map = Array("1\n0\n4096\n".utf8)
            tar.entry("GNUSparseFile.0/sparse", data: map + [UInt8](repeating: 0, count: 512 - map.count) + [UInt8](repeating: 0x61, count: 4096))
            archive = try dir.write(tar.finished(), to: "sparse.tar")
        } else {
            _ = try dir.write("data at the start\n", to: "site/head-hole/a")
            try run("truncate", ["-s", "1M", dir.path("site/head-hole/a")]).checked()
            try run("bash", ["-c", "truncate -s 1M \"$1\" && printf tail >> \"$1\"", "bash", dir.path("site/middle-hole")]).checked()
            archive = dir.path("sparse.tar")
            let create =
                switch form {
                case "bsdtar pax": ["bsdtar", "--format", "pax", "--read-sparse", "-cf"]
                case "gnu tar gnu": ["tar", "--format=gnu", "--sparse", "-cf"]
                default: ["tar", "--format=posix", "--sparse", "--sparse-version=1.0", "-cf"]
                }
            try run(create[0], Array(create.dropFirst()) + [archive, "-C", dir.path("site"), "."]).checked()
        }
        HostileCorpus.keep(archive, as: "sparse-\(form.replacingOccurrences(of: " ", with: "-")).tar")
        let reason = try Self.refusal(archive, in: dir)
        #expect(reason?.contains("sparse file") == true, "\(reason ?? "accepted")")
    }

    /// A tar of one file of `size` zero bytes, written without the file ever being on disk, zstd-compressed.
    static func zeros(_ size: Int, zstdOptions: String = "", in dir: TemporaryDirectory) throws -> String {
        var header = TarBuilder()
        header.entry("zeros", size: size)
        let headerPath = try dir.write(header.bytes, to: "zeros-header")
        let archive = dir.path("zeros.tar.zst")
        try run(
            "bash",
            ["-c", "set -o pipefail; { cat \"$1\"; head -c \"$2\" /dev/zero; head -c 1024 /dev/zero; } | zstd -1 $4 -q > \"$3\"", "bash",
             headerPath, String(size), archive, zstdOptions]
        ).checked()
        return archive
    }

    /// A tar of `size` zero bytes through zstd with a 128 MiB window (`--long=27`): the decoder's window
    /// fills as it inflates, so the process grows while the archive file is read only once.
    static func wideWindow(_ size: Int, in dir: TemporaryDirectory) throws -> String {
        try zeros(size, zstdOptions: "--long=27", in: dir)
    }

    /// Long headers are capped: libarchive refuses a pax or GNU long header over 1 MiB before holding it,
    /// and a path longer than Linux takes (4095 bytes, 255 per name) is the archive's fault, not a disk error.
    @Test(arguments: [
        ("pax header of 2 MiB", "Special header too large"), ("path of 5000 bytes", "path longer than 4095 bytes"),
        ("name of 300 bytes", "a name longer than 255 bytes"), ("GNU long name of 2 MiB", "Special header too large"),
    ])
    func refusesOverlongHeadersAndNames(form: String, reason expected: String) throws {
        let dir = try TemporaryDirectory()
        var tar = TarBuilder()
        switch form {
        case "pax header of 2 MiB": tar.pax([("comment", String(repeating: "a", count: 2 << 20))])
        case "path of 5000 bytes": tar.pax([("path", String(repeating: "d/", count: 2500))])
        case "name of 300 bytes": tar.pax([("path", String(repeating: "n", count: 300))])
        default: tar.entry("././@LongLink", type: "L", data: Array(String(repeating: "l", count: 2 << 20).utf8))
        }
        tar.entry("f", data: Array("x".utf8))
        let archive = try ArchiveLinkTests.compress(tar.finished(), format: "tar.gz", in: dir)
        HostileCorpus.keep(archive, as: "overlong-\(form.replacingOccurrences(of: " ", with: "-")).tar.gz")
        let reason = try Self.refusal(archive, in: dir)
        #expect(reason?.contains(expected) == true, "\(reason ?? "accepted")")
    }

    @Test func aSlowUnpackEndsAtItsDeadline() throws {
        let dir = try TemporaryDirectory()
        let archive = try Self.zeros(512 << 20, in: dir)
        HostileCorpus.keep(archive, as: "deadline-512MiB-zeros.tar.zst")
        let start = ContinuousClock.now
        let reason = try Self.refusal(archive, limits: UnpackLimits(deadline: 0.2), in: dir)
        #expect(reason == "unpack deadline of 0.2 s passed")
        #expect(ContinuousClock.now - start < .seconds(5))
    }

    @Test func aGrowingUnpackEndsAtItsMemoryBound() throws {
        let dir = try TemporaryDirectory()
        let archive = try Self.wideWindow(200 << 20, in: dir)
        HostileCorpus.keep(archive, as: "memory-zstd-128MiB-window.tar.zst")
        let reason = try Self.refusal(archive, limits: UnpackLimits(maxMemoryGrowth: 32 << 20), in: dir)
        #expect(reason?.hasPrefix("unpack memory bound of 32 MiB exceeded") == true, "\(reason ?? "accepted")")
    }

    /// Through a sync, as a device meets it: exit 4 naming the protection, staging removed, the lock
    /// released (the next sync takes it), the active set untouched.
    @Test(arguments: ["deadline", "memory"])
    func syncEndsABoundedUnpackAndReleasesTheLock(bound: String) async throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "v1")])
        try repo.publish()
        let root = try TemporaryDirectory()
        let limits = bound == "deadline" ? UnpackLimits(deadline: 0.2) : UnpackLimits(maxMemoryGrowth: 32 << 20)
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        var options = Updater.Options()
        options.unpackLimits = limits
        let manifest = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Updater(store: store, manifestURL: manifest, options: options).sync()
        let before = try FileSystem.read(root.path("active.json"))

        let dir = try TemporaryDirectory()
        let hostile = bound == "deadline" ? try Self.zeros(512 << 20, in: dir) : try Self.wideWindow(200 << 20, in: dir)
        try FileManager.default.copyItem(atPath: hostile, toPath: repo.path + "/archives/hostile")
        repo.edit("home") { entry in
            entry["version"] = "2"
            entry["archive"] = [
                "url": "archives/hostile", "sha256": try! FileHasher.sha256(ofFile: hostile),
                "size": try! FileSystem.read(hostile, limit: 64 << 20).count,
            ]
            entry["tree"] = String(repeating: "0", count: 64)
        }
        try repo.publish()
        let expected = bound == "deadline" ? "unpack deadline of 0.2 s passed" : "unpack memory bound of 32 MiB exceeded"
        await #expect {
            _ = try await Updater(store: store, manifestURL: manifest, options: options).sync()
        } throws: { error in
            (error as? OfflinePkgError)?.category == .refused && "\(error)".contains(expected)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path("staging")) == [])
        #expect(try FileSystem.read(root.path("active.json")) == before)
        #expect(try FileLock(path: root.path("lock"), wait: false) != nil)
    }
}
