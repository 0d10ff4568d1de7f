import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// The chunked tar.zst layout (docs/protocol.md#chunked-archives-and-file-indexes) as the world reads it: stock bsdtar and `zstd -d | tar` see an
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

    static func publish(_ scratch: TemporaryDirectory, site: String, repo: String) throws -> (PublishReport, PackageEntry) {
        let report = try Publisher(repository: URL(fileURLWithPath: repo)).publish(DemoSite.request(site: site, version: 1))
        let manifest = try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "manifest")
        return (report, try #require(manifest.packages.first))
    }

    @Test func stockToolsExtractItAndEveryIndexRangeIsExactlyItsMember() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked")
        let site = scratch.path("site"), repo = scratch.path("repo")
        let files = Self.siteFiles()
        try writeSite(files, to: site)
        let (report, entry) = try Self.publish(scratch, site: site, repo: repo)
        let archive = repo + "/" + entry.archive.url

        // An ordinary tar.zst for bsdtar and for zstd piped into GNU tar: the same tree as the manifest's.
        try FileSystem.makeDirectories(scratch.path("bsdtar"))
        try shell("bsdtar -xf '\(archive)' -C '\(scratch.path("bsdtar"))'")
        #expect(try treeHash(of: scratch.path("bsdtar")) == entry.tree)
        try FileSystem.makeDirectories(scratch.path("gnutar"))
        try shell("zstd -dc '\(archive)' | tar -xf - -C '\(scratch.path("gnutar"))' 2>/dev/null")
        #expect(try treeHash(of: scratch.path("gnutar")) == entry.tree)

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
            let member = scratch.path("member-\(number).tar")
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

    @Test func twoPublishesOfTheSameSiteWriteTheSameBytes() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked-repro")
        try writeSite(Self.siteFiles(), to: scratch.path("site"))
        let (_, first) = try Self.publish(scratch, site: scratch.path("site"), repo: scratch.path("repo-a"))
        // A copy made in another order, at another time: nothing of the file system leaks in.
        try shell("mkdir '\(scratch.path("copy"))' && cd '\(scratch.path("site"))' && find . -type f | sort -r | cpio -pdm --quiet '\(scratch.path("copy"))' && touch -d 2001-01-01 '\(scratch.path("copy"))/index.html'")
        let (_, second) = try Self.publish(scratch, site: scratch.path("copy"), repo: scratch.path("repo-b"))
        #expect(first.archive == second.archive)
        #expect(first.archive.files != nil)
        for url in [first.archive.url, try #require(first.archive.files).url] {
            #expect(try FileSystem.read(scratch.path("repo-a/" + url), limit: 64 << 20) == FileSystem.read(scratch.path("repo-b/" + url), limit: 64 << 20))
        }
        // Solid stays available, decompresses to the very same tar stream, and has no index.
        var solid = DemoSite.request(site: scratch.path("site"), version: 1)
        solid.layout = .solid
        let report = try Publisher(repository: URL(fileURLWithPath: scratch.path("repo-solid"))).publish(solid)
        #expect(report.fileIndex == nil)
        #expect(!FileSystem.exists(scratch.path("repo-solid/files")))
        let tars = try shell(
            "zstd -dc '\(scratch.path("repo-a/" + first.archive.url))' | sha256sum; zstd -dc '\(scratch.path("repo-solid/" + report.archive.url))' | sha256sum"
        ).split(separator: "\n")
        #expect(tars.count == 2 && tars[0] == tars[1])
        #expect(try shell("zstd -lv '\(scratch.path("repo-solid/" + report.archive.url))' 2>&1 | sed -n 's/^# Zstandard Frames: //p'") == "1\n")
    }

    /// The pipeline (files read and hashed on one thread, frames compressed on workers, written in
    /// order) gives the same bytes, ranges and hashes with one worker waiting after every frame as with
    /// several racing each other: frames finish out of order and must still go out in archive order.
    @Test func theBytesAreTheSameWhateverTheWorkersAndTheQueue() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked-workers")
        var files = Self.siteFiles()
        for number in 0..<300 { files["many/f\(number).txt"] = content("many \(number)", size: 100 + number * 37) }
        try writeSite(files, to: scratch.path("site"))
        let site = try SiteScan(site: scratch.path("site"))
        var results = [([UInt8], [String], [PackagePath: TreeFile])]()
        for (number, (workers, limit)) in [(1, 1), (3, 32 << 20), (2, 3 << 20), (4, 64 << 10)].enumerated() {
            let path = scratch.path("archive-\(number).tar.zst")
            let writer = try ChunkedArchiveWriter(path: path, level: 3, workers: workers, inFlightLimit: limit)
            var hashed = [PackagePath: TreeFile]()
            for entry in site.entries {
                if entry.isDirectory {
                    try writer.addDirectory(entry.path.string)
                } else {
                    hashed[entry.path] = try writer.addFile(entry.path.string, contentsOf: site.root + "/" + entry.path.string)
                }
            }
            let ranges = try writer.finish().map { "\($0.path) \($0.offset) \($0.length)" }
            results.append((try FileSystem.read(path, limit: 64 << 20), ranges, hashed))
        }
        #expect(results[0].2.count == files.count)
        for (path, bytes) in files { #expect(results[0].2[PackagePath(path)] == TreeFile(archived: SHA256.hash(bytes).hex, size: Int64(bytes.count))) }
        for result in results.dropFirst() {
            #expect(result.0 == results[0].0)
            #expect(result.1 == results[0].1)
            #expect(result.2 == results[0].2)
        }
    }

    /// A big file index goes out as several frames compressed side by side: the same bytes whatever
    /// the workers, one zstd stream for the device's decompressor and for the zstd tool.
    @Test func aBigFileIndexIsFramesThatDecompressAsOne() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked-index")
        let entries = (0..<9_000).map { number in
            FileIndex.Entry(
                path: PackagePath("assets/chunk-\(number).js"), sha256: SHA256.hash(Array("\(number)".utf8)).hex, size: Int64(number),
                offset: Int64(number * 1000), length: 900)
        }
        let json = FileIndex(entries: entries).encode()
        #expect(json.count > 2 * ZstdFrames.fileIndexPiece)
        let one = try ZstdFrames.fileIndex(json, workers: 1)
        #expect(try ZstdFrames.fileIndex(json, workers: 3) == one)
        #expect(try FileIndex.decompress(one, source: "index") == json)
        try FileSystem.write(one, to: scratch.path("index.json.zst"))
        let frames = (json.count + ZstdFrames.fileIndexPiece - 1) / ZstdFrames.fileIndexPiece
        #expect(try shell("zstd -lv '\(scratch.path("index.json.zst"))' 2>&1 | sed -n 's/^# Zstandard Frames: //p'") == "\(frames)\n")
        #expect(try shell("zstd -dc '\(scratch.path("index.json.zst"))' | sha256sum | cut -c1-64") == SHA256.hash(json).hex + "\n")
    }

    /// Frames are written into shared batch buffers and compressed a batch at a time: at the edges of
    /// a batch (an input that fills it to the byte, one that no longer fits, one bigger than a batch,
    /// an empty one) every frame comes back in order, with its length, as the very bytes it gets
    /// compressed alone, whatever the workers and the queue, and all decompress as one stream.
    @Test func framesBatchedTogetherAreTheFramesOfEachInputAlone() async throws {
        let batch = ZstdFrames.batchBytes
        let sizes = [0, 1, 100, batch - 1, 1, batch, batch / 3, batch / 3, batch / 3, 2 * batch + 5, 0] + (0..<60).map { 50 + $0 * 97 }
        let inputs = sizes.enumerated().map { number, size in
            (0..<size).map { UInt8(truncatingIfNeeded: ($0 / 7) &* 31 &+ number &+ ($0 % 13 == 0 ? $0 >> 5 : 0)) }
        }
        func frames(workers: Int, limit: Int) throws -> [[UInt8]] {
            let zstd = try ZstdFrames(level: 3, workers: workers, inFlightLimit: limit)
            var batches = [ZstdFrames.Batch]()
            for input in inputs { batches += try zstd.submit(input) }
            batches += try zstd.finish()
            return batches.flatMap { batch in
                var offset = 0
                return batch.lengths.map { length in
                    defer { offset += length }
                    return Array(batch.bytes[offset..<offset + length])
                }
            }
        }
        let alone = try inputs.map { input in
            let zstd = try ZstdFrames(level: 3, workers: 1)
            let batches = try zstd.submit(input) + zstd.finish()
            #expect(batches.count == 1 && batches[0].lengths == [batches[0].bytes.count])
            return batches[0].bytes
        }
        for (workers, limit) in [(1, 1), (2, 32 << 20), (3, 100 << 10)] {
            #expect(try frames(workers: workers, limit: limit) == alone, "\(workers) workers, limit \(limit)")
        }
        let scratch = try TemporaryDirectory(prefix: "chunked-batches")
        try FileSystem.write(Array(alone.joined()), to: scratch.path("frames.zst"))
        #expect(try shell("zstd -lv '\(scratch.path("frames.zst"))' 2>&1 | sed -n 's/^# Zstandard Frames: //p'") == "\(inputs.count)\n")
        #expect(try shell("zstd -dc '\(scratch.path("frames.zst"))' | sha256sum | cut -c1-64") == SHA256.hash(Array(inputs.joined())).hex + "\n")
    }

    /// A file whose size differs from what `fstat` said is refused, not archived torn (a /proc file
    /// says 0 bytes and reads more).
    @Test func aFileThatGrowsWhileItIsReadIsRefused() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked-grows")
        let writer = try ChunkedArchiveWriter(path: scratch.path("a.tar.zst"), level: 3, workers: 1)
        #expect {
            _ = try writer.addFile("status", contentsOf: "/proc/self/status")
        } throws: { error in
            "\(error)".contains("/proc/self/status grew while it was being archived")
        }
    }

    /// The solid writers (tar.zst solid, tar.gz, zip) read into a buffer the size of the file plus one
    /// byte: a file that reads more than `fstat` said is still caught, and a file of exactly its size is
    /// archived whole.
    @Test(arguments: ArchiveFormat.allCases) func theSolidWritersRefuseAGrowingFileAndKeepAWholeOne(format: ArchiveFormat) async throws {
        let scratch = try TemporaryDirectory(prefix: "solid-grows")
        let writer = try ArchiveWriter(path: scratch.path("a.\(format.rawValue)"), format: format)
        #expect {
            _ = try writer.addFile("status", contentsOf: "/proc/self/status")
        } throws: { error in
            "\(error)".contains("/proc/self/status grew while it was being archived")
        }
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try FileSystem.write(bytes, to: scratch.path("big.bin"))
        let whole = try ArchiveWriter(path: scratch.path("b.\(format.rawValue)"), format: format)
        let file = try whole.addFile("big.bin", contentsOf: scratch.path("big.bin"))
        try whole.finish()
        #expect(file.sha256 == SHA256.hash(bytes).hex && file.size == 300_000)
        #expect(try shell("bsdtar -xOf '\(scratch.path("b.\(format.rawValue)"))' big.bin | sha256sum | cut -c1-64") == SHA256.hash(bytes).hex + "\n")
    }

    @Test func theFileIndexIsWrittenOnceAndTravelsWithPromote() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked-promote")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        let (_, entry) = try Self.publish(scratch, site: scratch.path("site"), repo: scratch.path("staging"))
        let reference = try #require(entry.archive.files)
        let indexPath = scratch.path("staging/" + reference.url)
        try shell("touch -d 2001-01-01 '\(indexPath)'")
        // Republishing the same content finds the index there with the same bytes and leaves it alone.
        _ = try Self.publish(scratch, site: scratch.path("site"), repo: scratch.path("staging"))
        #expect(try shell("date -r '\(indexPath)' +%Y") == "2001\n")

        let production = Publisher(repository: URL(fileURLWithPath: scratch.path("production")))
        _ = try production.promote(id: "app", version: "1.0", from: URL(fileURLWithPath: scratch.path("staging")))
        let promoted = try Manifest(parsing: FileSystem.read(scratch.path("production/manifest.json")), source: "production")
        #expect(promoted.packages.first?.archive == entry.archive)
        #expect(try FileSystem.read(scratch.path("production/" + reference.url)) == FileSystem.read(indexPath))
    }

    @Test func aDeviceInstallsAChunkedArchiveWithOfflinepkgSync() async throws {
        let scratch = try TemporaryDirectory(prefix: "chunked-sync")
        let site = scratch.path("site"), repo = scratch.path("repo"), root = scratch.path("root")
        try writeSite(Self.siteFiles(), to: site)
        let (report, entry) = try Self.publish(scratch, site: site, repo: repo)
        #expect(entry.archive.files != nil)
        let result = await InProcessCLI.run(["sync", repo + "/manifest.json", "--root", root, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("\"via\" : \"archive\"") || result.stdout.contains("\"via\":\"archive\""), "\(result.stdout)")
        let tree = installedTree(root: root, id: "app", version: report.version, tree: report.tree)
        #expect(try treeHash(of: tree) == entry.tree)
        #expect(sameFiles(site, tree))
    }
}
