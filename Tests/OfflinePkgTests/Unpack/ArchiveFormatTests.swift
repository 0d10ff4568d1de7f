import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The formats of docs/protocol.md#archives: tar (ustar, pax, GNU) and zip, the tar optionally gzip, bzip2, xz, zstd or lz4,
/// recognised by content. Everything else libarchive could read is refused before any entry, and no
/// external program is ever started.
@Suite("Archive formats")
struct ArchiveFormatTests {
    /// Unpacks `archive` and returns the refusal, checking that nothing was written to staging.
    static func refusalBeforeAnyEntry(_ archive: String, in dir: TemporaryDirectory) throws -> String? {
        let staging = try dir.makeDirectory("staging-\(UUID().uuidString)")
        defer { #expect((try? FileManager.default.contentsOfDirectory(atPath: staging)) == []) }
        do {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: archive, into: staging)
            return nil
        } catch let error as OfflinePkgError {
            guard case .archiveRefused(_, let entry, let reason) = error, entry == nil else { return "not refused: \(error)" }
            return reason
        }
    }

    /// The reasons of a refusal at open: not a tar or zip; or, for content a tar reader takes for an
    /// end-of-archive block (an ISO 9660 image starts with 32 KiB of zeros), an archive of no entries.
    static func isFormatRefusal(_ reason: String?) -> Bool {
        guard let reason else { return false }
        return reason.contains("not a tar or zip archive") || reason == "not an archive, or an empty one"
    }

    static func site(in dir: TemporaryDirectory) throws -> String {
        try writeSite([SiteFile("f", "hi\n")], to: dir.path("site"))
        return dir.path("site")
    }

    /// Every other format stock bsdtar writes.
    static let refusedFormats = [
        "7zip", "iso9660", "xar", "cpio", "newc", "odc", "arbsd", "argnu", "warc", "mtree", "shar", "shardump", "raw",
    ]

    @Test(arguments: refusedFormats)
    func refusesEveryOtherFormatBeforeAnyEntry(format: String) throws {
        let dir = try TemporaryDirectory()
        let site = try Self.site(in: dir)
        let archive = dir.path("a.\(format)")
        try run("bsdtar", ["--format", format, "-cf", archive, "-C", site, "f"]).checked()
        HostileCorpus.keep(archive, as: "format-\(format)")
        let reason = try Self.refusalBeforeAnyEntry(archive, in: dir)
        #expect(Self.isFormatRefusal(reason), "\(reason ?? "accepted")")
    }

    /// A refused format behind an allowed filter is still refused.
    @Test(arguments: [("cpio", "-z"), ("xar", "--zstd"), ("iso9660", "-J"), ("7zip", "--lz4")])
    func refusesOtherFormatsInsideAnAllowedFilter(format: String, filter: String) throws {
        let dir = try TemporaryDirectory()
        let site = try Self.site(in: dir)
        let archive = dir.path("a.\(format)")
        try run("bsdtar", ["--format", format, filter, "-cf", archive, "-C", site, "f"]).checked()
        HostileCorpus.keep(archive, as: "format-\(format)\(filter)")
        let reason = try Self.refusalBeforeAnyEntry(archive, in: dir)
        #expect(Self.isFormatRefusal(reason), "\(reason ?? "accepted")")
    }

    /// grzip's signature (libarchive hands grzip content to `grzip -d`): no grzip is installed to write one.
    static let grzipMagic: [UInt8] = Array("GRZipII".utf8) + [0x00, 0x02, 0x04, 0x3a, 0x29]

    /// Builds a tar of the site through `filter` (a bsdtar flag), or the grzip signature for "--grzip".
    static func filtered(_ filter: String, in dir: TemporaryDirectory) throws -> String {
        let archive = dir.path("a.tar\(filter)")
        if filter == "--grzip" {
            _ = try dir.write(grzipMagic + [UInt8](repeating: 0x41, count: 4096), to: "a.tar\(filter)")
        } else {
            try run("bsdtar", [filter, "-cf", archive, "-C", try site(in: dir), "f"]).checked()
        }
        HostileCorpus.keep(archive, as: "filter\(filter)")
        return archive
    }

    static let refusedFilters = ["--lzop", "--lrzip", "--grzip", "--lzip", "--lzma", "--uuencode", "--b64encode", "-Z"]

    @Test(arguments: refusedFilters)
    func refusesEveryOtherCompressionBeforeAnyEntry(filter: String) throws {
        let dir = try TemporaryDirectory()
        let reason = try Self.refusalBeforeAnyEntry(try Self.filtered(filter, in: dir), in: dir)
        #expect(Self.isFormatRefusal(reason), "\(reason ?? "accepted")")
    }

    /// gzip inside gzip is not peeled layer after layer: one filter, and what it yields must be a tar.
    @Test(arguments: [2, 3, 30])
    func refusesARecursivelyGzippedTar(layers: Int) throws {
        let dir = try TemporaryDirectory()
        var archive = dir.path("a.tar.gz")
        try run("bsdtar", ["-czf", archive, "-C", try Self.site(in: dir), "f"]).checked()
        for layer in 2...layers {
            let next = dir.path("a.tar" + String(repeating: ".gz", count: layer))
            try run("bash", ["-c", "gzip -c < \"$1\" > \"$2\"", "bash", archive, next]).checked()
            archive = next
        }
        HostileCorpus.keep(archive, as: "gzip-layers-\(layers).tar.gz")
        let reason = try Self.refusalBeforeAnyEntry(archive, in: dir)
        #expect(Self.isFormatRefusal(reason), "\(reason ?? "accepted")")
    }

    /// docs/protocol.md#archives lets a tar be compressed, not a zip.
    @Test func refusesACompressedZip() throws {
        let dir = try TemporaryDirectory()
        let zip = dir.path("a.zip")
        try run("bsdtar", ["--format", "zip", "-cf", zip, "-C", try Self.site(in: dir), "f"]).checked()
        try run("bash", ["-c", "gzip -c < \"$1\" > \"$1.gz\"", "bash", zip]).checked()
        HostileCorpus.keep(zip + ".gz", as: "zip.gz")
        let staging = try dir.makeDirectory("staging")
        #expect {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: zip + ".gz", into: staging)
        } throws: { error in
            guard case .archiveRefused(_, _, let reason) = error as? OfflinePkgError else { return false }
            return reason.contains("a compressed zip")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: staging) == [])
    }

    /// The programs libarchive would start for a filter it cannot decode itself; each one in a fake
    /// `$PATH` leaves a marker, so any start shows.
    static let externalPrograms = [
        "lzop", "lrzip", "grzip", "lzip", "lzma", "xz", "unxz", "gzip", "gunzip", "bzip2", "bunzip2", "zstd", "lz4",
        "uudecode", "compress", "uncompress", "lzcat", "xzcat", "zcat",
    ]

    /// The whole path as a device meets it: `offlinepkg sync` with a `$PATH` of decoys. The refused
    /// filters exit 4, the five allowed ones install, and no decoy ever runs.
    @Test func syncNeverStartsAnExternalProgram() throws {
        let dir = try TemporaryDirectory()
        let decoys = try dir.makeDirectory("decoys")
        let markers = try dir.makeDirectory("markers")
        for program in Self.externalPrograms {
            let script = try dir.write("#!/bin/sh\ntouch '\(markers)/\(program)'\nexit 1\n", to: "decoys/\(program)")
            chmod(script, 0o755)
        }
        let site = try Self.site(in: dir)
        let tree = try treeHash(of: site)
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = decoys + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        let clean = ["-z", "-j", "-J", "--zstd", "--lz4"]
        // Zip entries claiming each compression method libarchive knows beyond deflate (bzip2, lzma, zstd,
        // xz, ppmd, AES): its zip reader decodes in process or refuses, never through a program.
        let zipMethods: [UInt8] = [12, 14, 93, 95, 98, 99]
        let zip = dir.path("a.zip")
        try run("bsdtar", ["--format", "zip", "-cf", zip, "-C", site, "f"]).checked()
        for method in zipMethods {
            var bytes = try FileSystem.read(zip)
            for offset in ZipSurgery.offsets(of: ZipSurgery.local, in: bytes) { bytes[offset + 8] = method }
            for offset in ZipSurgery.offsets(of: ZipSurgery.central, in: bytes) { bytes[offset + 10] = method }
            HostileCorpus.keep(try dir.write(bytes, to: "method\(method).zip"), as: "zip-method-\(method).zip")
        }
        for filter in Self.refusedFilters + clean + zipMethods.map({ "method\($0).zip" }) {
            let archive =
                clean.contains(filter) ? dir.path("clean\(filter).tar")
                : filter.hasSuffix(".zip") ? dir.path(filter) : try Self.filtered(filter, in: dir)
            if clean.contains(filter) { try run("bsdtar", [filter, "-cf", archive, "-C", site, "f"]).checked() }
            let repo = try dir.makeDirectory("repo\(filter)")
            let entry = try makeManifestEntry(
                id: "p", version: "1", routes: ["https://m.example.com/"], archivePath: archive, archiveURL: "file://" + archive,
                tree: tree)
            try writeManifest(packages: [entry], sequence: 1, to: repo + "/manifest.json")
            let result = try OfflinePkgBinary.run(
                ["sync", "file://\(repo)/manifest.json", "--root", dir.path("root\(filter)"), "--quiet"], environment: environment)
            #expect(result.status == (clean.contains(filter) ? 0 : 4), "\(filter): \(result.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: markers) == [])
    }
}
