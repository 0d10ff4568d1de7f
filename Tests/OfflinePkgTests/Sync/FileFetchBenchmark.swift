import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// What a device pays for version gaps of 1, 5 and 20 on a real site (`/usr/share/doc`), against nginx,
/// with 20 releases of a few changed files each, in process on the test builder's archives (a debug
/// build: practical up to a few hundred files; `scripts/bench-files` measures 3,000+ with the release
/// CLI). Off unless `OFFLINEPKG_BENCH_FILES` is set (its value: the number of files). Prints a markdown table.
@Suite struct FileFetchBenchmark {
    static let wanted = Int(ProcessInfo.processInfo.environment["OFFLINEPKG_BENCH_FILES"] ?? "") ?? 0

    /// The first `count` files of /usr/share/doc in byte order whose paths fit a ustar name.
    static func realSite(count: Int) throws -> [String: [UInt8]] {
        let root = "/usr/share/doc"
        var paths = [String]()
        let walker = FileManager.default.enumerator(atPath: root)
        while let path = walker?.nextObject() as? String {
            var isFolder: ObjCBool = false
            let full = root + "/" + path
            guard FileManager.default.fileExists(atPath: full, isDirectory: &isFolder), !isFolder.boolValue,
                (try? FileManager.default.destinationOfSymbolicLink(atPath: full)) == nil, path.utf8.count <= 100
            else { continue }
            paths.append(path)
        }
        paths.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var files = [String: [UInt8]]()
        for path in paths.prefix(count) {
            files[path] = [UInt8](FileManager.default.contents(atPath: root + "/" + path) ?? Data())
        }
        return files
    }

    /// Release `version`: five files of its own changed (a line appended), on top of the earlier releases.
    static func release(_ base: [String: [UInt8]], version: Int) -> [String: [UInt8]] {
        let paths = base.keys.sorted()
        var files = base
        for release in stride(from: 2, through: version, by: 1) {
            for step in 0..<5 {
                let path = paths[(release * 7919 + step * 104_729) % paths.count]
                files[path]! += Array("\nchanged in release \(release)\n".utf8)
            }
        }
        return files
    }

    @Test(.enabled(if: wanted > 0)) func bytesPerVersionGap() async throws {
        let base = try Self.realSite(count: Self.wanted)
        let repo = try FileFetchTests.Repo(label: "bench-files")
        let v1 = try repo.publish(1, files: Self.release(base, version: 1))
        let roots = try (0..<3).map { _ in try TemporaryDirectory(prefix: "bench-device") }
        var cold = [Double]()
        for root in roots {
            let start = ContinuousClock.now
            _ = try await FileFetchTests.sync(root.path, repo.manifestURL)
            cold.append((ContinuousClock.now - start) / .seconds(1))
        }
        print("site: \(base.count) files of /usr/share/doc, \(base.values.reduce(0) { $0 + $1.count } / 1024) KiB; 20 releases of 5 changed files")
        print("")
        print("| gap | via | network bytes | requests | changed files' frames + index | ratio | full archive | index |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        var version = 1
        for (gap, root) in zip([1, 5, 20], roots) {
            while version < 1 + gap {
                version += 1
                try repo.publish(version, files: Self.release(base, version: version))
            }
            let built = try #require(repo.reports[version])
            let before = repo.nginx.accessLog().count
            let report = try await FileFetchTests.sync(root.path, repo.manifestURL)
            let log = repo.nginx.waitForRequests(before + 2)
            let lines = log.dropFirst(before).filter { $0.uri != "/manifest.json" }
            let network = lines.reduce(0) { $0 + $1.bodyBytesSent }
            let index = FileFetchTests.size(repo, built.indexURL)
            let ideal = FileFetchTests.neededFrames(built, held: FileFetchTests.held(v1)) + index
            let ratio = Double(network) / Double(ideal)
            print(
                "| \(gap) | \(report.changes.first?.via ?? "-") | \(network) | \(lines.count) | \(ideal) | "
                    + String(format: "%.3f", ratio) + " | \(FileFetchTests.size(repo, built.archiveURL)) | \(index) |")
            #expect(report.changes.first?.via == "files")
        }
        // Cold sync of the last release, chunked against a solid tar.zst of the same site (bsdtar).
        let last = repo.site("app", version)
        let solid = repo.repo + "/solid"
        try FileSystem.makeDirectories(solid + "/archives")
        try makeArchive(of: last, to: solid + "/archives/app.tar.zst", format: .tarZst)
        let entry = try makeManifestEntry(
            id: "app", version: "\(version).0", routes: ["https://m.example.com/app/"], archivePath: solid + "/archives/app.tar.zst",
            archiveURL: "archives/app.tar.zst", tree: try treeHash(of: last))
        try writeManifest(packages: [entry], sequence: 1, to: solid + "/manifest.json")
        var times = [String: Double]()
        for (name, url) in [("chunked", repo.manifestURL), ("solid", repo.nginx.url("solid/manifest.json"))] {
            let root = try TemporaryDirectory(prefix: "bench-cold")
            let start = ContinuousClock.now
            _ = try await FileFetchTests.sync(root.path, url)
            times[name] = (ContinuousClock.now - start) / .seconds(1)
        }
        print("")
        print(
            "archive of release \(version): chunked \(FileFetchTests.size(repo, repo.reports[version]!.archiveURL)) B (stock zstd -3 a member), "
                + "solid \(FileSystem.fileSize(solid + "/archives/app.tar.zst") ?? 0) B (bsdtar --zstd)")
        print(
            "cold sync: chunked over nginx " + String(format: "%.2f s", times["chunked"]!) + ", solid over nginx "
                + String(format: "%.2f s", times["solid"]!) + "; v1 cold syncs over nginx: "
                + cold.map { String(format: "%.2f s", $0) }.joined(separator: ", "))
    }
}
