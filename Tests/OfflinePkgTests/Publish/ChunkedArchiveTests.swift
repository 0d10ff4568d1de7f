import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The chunked tar.zst layout (SPEC §13) as the world reads it: stock bsdtar and `zstd -d | tar` see an
/// ordinary tar.zst, every file index range decompresses alone (with the zstd tool) to that one member,
/// the index is the one the manifest names, the bytes are reproducible, and a device installs it.
@Suite struct ChunkedArchiveTests {
    /// Small files, a long path (a pax header), a non-ASCII name, an empty file, nested folders, and a
    /// file of 2.5 frames (`ChunkedArchiveWriter.frameSize` is 2 MiB).
    static func siteFiles() -> [String: [UInt8]] {
        var files = DemoSite.files(version: 1)
        files["media/big.bin"] = content("big", size: 5 << 20)
        files["empty.txt"] = []
        files["text/caf\u{e9} cr\u{e8}me.txt"] = Array(String(repeating: "compressible text ", count: 500).utf8)
        files[String(repeating: "deep/", count: 30) + String(repeating: "n", count: 80) + ".js"] = content("long", size: 700)
        return files
    }

    static func publish(_ scratch: TemporaryFolder, site: String, repo: String) throws -> (PublishReport, PackageEntry) {
        let report = try Publisher(repository: URL(fileURLWithPath: repo)).publish(DemoSite.request(site: site, version: 1))
        let manifest = try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "manifest")
        return (report, try #require(manifest.packages.first))
    }

    @Test func stockToolsExtractItAndEveryIndexRangeIsExactlyItsMember() throws {
        let scratch = try TemporaryFolder("chunked")
        let site = scratch.sub("site"), repo = scratch.sub("repo")
        let files = Self.siteFiles()
        try writeSite(site, files)
        let (report, entry) = try Self.publish(scratch, site: site, repo: repo)
        let archive = repo + "/" + entry.archive.url

        // An ordinary tar.zst for bsdtar and for zstd piped into GNU tar: the same tree as the manifest's.
        try FileSystem.makeDirectories(scratch.sub("bsdtar"))
        try shell("bsdtar -xf '\(archive)' -C '\(scratch.sub("bsdtar"))'")
        #expect(try coreutilsTreeHash(scratch.sub("bsdtar")) == entry.tree)
        try FileSystem.makeDirectories(scratch.sub("gnutar"))
        try shell("zstd -dc '\(archive)' | tar -xf - -C '\(scratch.sub("gnutar"))' 2>/dev/null")
        #expect(try coreutilsTreeHash(scratch.sub("gnutar")) == entry.tree)

        // The index the manifest names: its bytes match sha256 and size, it lists every file once.
        let reference = try #require(entry.archive.files)
        #expect(report.fileIndex?.url == reference.url)
        #expect(reference.url == "files/\(reference.sha256).json.zst")
        let compressed = try FileSystem.read(repo + "/" + reference.url)
        #expect(Int64(compressed.count) == reference.size)
        #expect(SHA256.hash(compressed).hex == reference.sha256)
        let index = try FileIndex.decode(
            json: FileIndex.decompress(compressed, source: reference.url), archiveSize: entry.archive.size, source: reference.url)
        #expect(index.entries.map(\.path) == files.keys.map { PackagePath($0) }.sorted())

        // Every range, cut out with tail/head and decompressed with the zstd tool, is one whole tar
        // member — header block(s), data, padding, no end blocks — holding the listed bytes.
        for (number, item) in index.entries.enumerated() {
            let member = scratch.sub("member-\(number).tar")
            // tail ends on SIGPIPE when head has its bytes: that is expected, not a failure.
            try shell("{ tail -c +\(item.offset + 1) '\(archive)' || true; } | head -c \(item.length) | zstd -dc > '\(member)'")
            let tar = try FileSystem.read(member, limit: 64 << 20)
            #expect(Self.memberLength(tar) == tar.count, "\(item.path): not exactly one member")
            let listed = try shell("bsdtar -tf '\(member)'")
            #expect(listed == item.path.string + "\n")
            let data = try shell("bsdtar -xOf '\(member)' | sha256sum | cut -c1-64; bsdtar -xOf '\(member)' | wc -c")
            #expect(data == "\(item.sha256)\n\(item.size)\n", "\(item.path)")
            #expect(SHA256.hash(files[item.path.string]!).hex == item.sha256)
        }
        // A frame per member (folders too), three for the 5 MiB file, one for the end blocks.
        let folders = Set(files.keys.flatMap { path in
            PackagePath(path).parent.map { parent in
                sequence(first: parent, next: \.parent).map(\.string)
            } ?? []
        })
        let frames = try shell("zstd -lv '\(archive)' 2>&1 | sed -n 's/^# Zstandard Frames: //p'")
        #expect(frames == "\(files.count + folders.count + 2 + 1)\n")
    }

    /// The bytes of the tar member at the start of `tar`, by its headers: a pax or GNU extended header
    /// and its data, then the ustar header and the file's data, padded to 512. Nil if it is cut short.
    static func memberLength(_ tar: [UInt8]) -> Int? {
        var position = 0
        while position + 512 <= tar.count {
            let header = tar[position..<position + 512]
            let size = TarExtendedHeaders.Scanner.size(header[(position + 124)..<(position + 136)])
            let type = tar[position + 156]
            position += 512 + (size + 511) / 512 * 512
            if ![UInt8(ascii: "x"), UInt8(ascii: "L"), UInt8(ascii: "K")].contains(type) {
                return position <= tar.count ? position : nil
            }
        }
        return nil
    }

    @Test func twoPublishesOfTheSameSiteWriteTheSameBytes() throws {
        let scratch = try TemporaryFolder("chunked-repro")
        try writeSite(scratch.sub("site"), Self.siteFiles())
        let (_, first) = try Self.publish(scratch, site: scratch.sub("site"), repo: scratch.sub("repo-a"))
        // A copy made in another order, at another time: nothing of the file system leaks in.
        try shell("mkdir '\(scratch.sub("copy"))' && cd '\(scratch.sub("site"))' && find . -type f | sort -r | cpio -pdm --quiet '\(scratch.sub("copy"))' && touch -d 2001-01-01 '\(scratch.sub("copy"))/index.html'")
        let (_, second) = try Self.publish(scratch, site: scratch.sub("copy"), repo: scratch.sub("repo-b"))
        #expect(first.archive == second.archive)
        #expect(first.archive.files != nil)
        for url in [first.archive.url, try #require(first.archive.files).url] {
            #expect(try FileSystem.read(scratch.sub("repo-a/" + url), limit: 64 << 20) == FileSystem.read(scratch.sub("repo-b/" + url), limit: 64 << 20))
        }
        // Solid stays available, decompresses to the very same tar stream, and has no index.
        var solid = DemoSite.request(site: scratch.sub("site"), version: 1)
        solid.layout = .solid
        let report = try Publisher(repository: URL(fileURLWithPath: scratch.sub("repo-solid"))).publish(solid)
        #expect(report.fileIndex == nil)
        #expect(!FileSystem.exists(scratch.sub("repo-solid/files")))
        let tars = try shell(
            "zstd -dc '\(scratch.sub("repo-a/" + first.archive.url))' | sha256sum; zstd -dc '\(scratch.sub("repo-solid/" + report.archive.url))' | sha256sum"
        ).split(separator: "\n")
        #expect(tars.count == 2 && tars[0] == tars[1])
        #expect(try shell("zstd -lv '\(scratch.sub("repo-solid/" + report.archive.url))' 2>&1 | sed -n 's/^# Zstandard Frames: //p'") == "1\n")
    }

    @Test func theFileIndexIsWrittenOnceAndTravelsWithPromote() throws {
        let scratch = try TemporaryFolder("chunked-promote")
        try writeSite(scratch.sub("site"), DemoSite.files(version: 1))
        let (_, entry) = try Self.publish(scratch, site: scratch.sub("site"), repo: scratch.sub("staging"))
        let reference = try #require(entry.archive.files)
        let indexPath = scratch.sub("staging/" + reference.url)
        try shell("touch -d 2001-01-01 '\(indexPath)'")
        // Republishing the same content finds the index there with the same bytes and leaves it alone.
        _ = try Self.publish(scratch, site: scratch.sub("site"), repo: scratch.sub("staging"))
        #expect(try shell("date -r '\(indexPath)' +%Y") == "2001\n")

        let production = Publisher(repository: URL(fileURLWithPath: scratch.sub("production")))
        _ = try production.promote(id: "app", version: "1.0", from: URL(fileURLWithPath: scratch.sub("staging")))
        let promoted = try Manifest(parsing: FileSystem.read(scratch.sub("production/manifest.json")), source: "production")
        #expect(promoted.packages.first?.archive == entry.archive)
        #expect(try FileSystem.read(scratch.sub("production/" + reference.url)) == FileSystem.read(indexPath))
    }

    @Test func aDeviceInstallsAChunkedArchiveWithOfflinepkgSync() throws {
        let scratch = try TemporaryFolder("chunked-sync")
        let site = scratch.sub("site"), repo = scratch.sub("repo"), root = scratch.sub("root")
        try writeSite(site, Self.siteFiles())
        let (report, entry) = try Self.publish(scratch, site: site, repo: repo)
        #expect(entry.archive.files != nil)
        let result = try OfflinePkgBinary.run(["sync", repo + "/manifest.json", "--root", root, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("\"via\" : \"archive\"") || result.stdout.contains("\"via\":\"archive\""), "\(result.stdout)")
        let tree = installedTree(root: root, id: "app", version: report.version, tree: report.tree)
        #expect(try coreutilsTreeHash(tree) == entry.tree)
        #expect(sameFiles(site, tree))
    }
}
