import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// Proves the shared test helpers do what other tests rely on: if a helper is wrong, every test
/// built on it proves nothing.
@Suite struct TestSupportTests {
    // MARK: - TemporaryDirectory

    @Test func temporaryDirectoryRemovesReadOnlyTrees() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.write("hello", to: "pkg/v1/css/app.css")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "hello")
        // The modes an installed tree has.
        chmod(file, 0o444)
        for folder in ["pkg/v1/css", "pkg/v1", "pkg"] { chmod(directory.path(folder), 0o555) }
        directory.remove()
        #expect(!FileManager.default.fileExists(atPath: directory.path))
        directory.remove()  // idempotent
    }

    @Test func temporaryDirectoryIsRemovedOnDeinit() throws {
        var path = ""
        do {
            let directory = try TemporaryDirectory()
            path = try directory.write([1, 2, 3], to: "a/b")
            #expect(FileManager.default.contents(atPath: path) == Data([1, 2, 3]))
            path = directory.path
        }
        #expect(!path.isEmpty && !FileManager.default.fileExists(atPath: path))
    }

    // MARK: - ProcessRunner

    @Test func processRunnerCapturesLargeOutputOnBothStreams() throws {
        // 300 KB on each stream: far more than a pipe holds, so reading one stream before the other
        // would deadlock.
        let script = "head -c 300000 /dev/zero | tr '\\0' o; head -c 300000 /dev/zero | tr '\\0' e >&2; exit 7"
        let result = try run("bash", ["-c", script])
        #expect(result.status == 7)
        #expect(result.stdout.utf8.count == 300_000 && result.stdout.allSatisfy { $0 == "o" })
        #expect(result.stderr.utf8.count == 300_000 && result.stderr.allSatisfy { $0 == "e" })
        #expect(throws: TestSupportError.self) { try result.checked() }
    }

    @Test func processRunnerPassesEnvironmentAndDirectory() throws {
        let directory = try TemporaryDirectory()
        let result = try run(
            "bash", ["-c", "echo \"$GREETING\"; pwd"], environment: ["GREETING": "hi"], currentDirectory: directory.path
        )
        #expect(result.status == 0)
        #expect(result.stdout == "hi\n\(directory.path)\n")
    }

    @Test func processRunnerKillsAChildPastItsTimeout() throws {
        let started = Date()
        let result = try run("sleep", ["10"], timeout: 0.3)
        #expect(result.status == 128 + SIGKILL)
        #expect(Date().timeIntervalSince(started) < 5)
    }

    @Test func whichFindsInstalledTools() {
        #expect(which("curl") != nil)
        #expect(which("nginx") == "/usr/sbin/nginx")
        #expect(which("no-such-tool-offlinepkg") == nil)
    }

    // MARK: - NginxServer

    @Test func nginxServesRangesAndLogsTheirHeaders() throws {
        let site = try TemporaryDirectory()
        let content = pattern(10_000)
        try site.write(content, to: "data.bin")
        let server = try NginxServer(documentRoot: site.path)
        let output = try TemporaryDirectory()

        let partial = try curl([
            "-r", "1000-", "-o", output.path("partial"), "-w", "%{http_code}", server.url("data.bin").absoluteString,
        ])
        #expect(partial.stdout == "206")
        #expect(FileManager.default.contents(atPath: output.path("partial")) == Data(content[1000...]))

        let head = try curl(["-I", server.url("data.bin").absoluteString])
        let etag = try #require(headerValue("etag", in: head.stdout))
        let lastModified = try #require(headerValue("last-modified", in: head.stdout))
        let conditional = try curl([
            "-o", "/dev/null", "-w", "%{http_code}", "-H", "If-None-Match: \(etag)",
            "-H", "If-Modified-Since: \(lastModified)", server.url("data.bin").absoluteString,
        ])
        #expect(conditional.stdout == "304")

        let log = server.waitForRequests(3)
        try #require(log.count == 3)
        #expect(log[0].method == "GET" && log[0].uri == "/data.bin" && log[0].status == 206)
        #expect(log[0].range == "bytes=1000-" && log[0].bodyBytesSent == 9_000 && log[0].bytesSent > 9_000)
        #expect(log[1].method == "HEAD" && log[1].range == nil && log[1].bodyBytesSent == 0)
        #expect(log[2].status == 304 && log[2].ifNoneMatch == etag)
        #expect(log[2].ifModifiedSince == lastModified)
        #expect(server.requestCount(path: "data.bin") == 3 && server.requestCount(path: "/other") == 0)
    }

    @Test func nginxLimitRateSlowsATransfer() throws {
        let site = try TemporaryDirectory()
        try site.write(pattern(200_000), to: "slow.bin")
        // nginx sends the first second's allowance at once, so 2 × rate takes about a second.
        let server = try NginxServer(documentRoot: site.path, limitRate: 100_000)
        let started = Date()
        let result = try curl(["-o", "/dev/null", "-w", "%{size_download}", server.url("slow.bin").absoluteString])
        let elapsed = Date().timeIntervalSince(started)
        #expect(result.status == 0 && result.stdout == "200000")
        #expect(elapsed > 0.8, "200 KB at 100 KB/s took only \(elapsed) s")
    }

    @Test func nginxInstancesRunSideBySideWithExtraLocations() throws {
        let first = try TemporaryDirectory()
        let second = try TemporaryDirectory()
        try first.write("first", to: "site root/name.txt")  // a space, which the config must quote
        try second.write("second", to: "name.txt")
        let a = try NginxServer(documentRoot: first.path("site root"))
        let b = try NginxServer(documentRoot: second.path, locations: "location = /teapot { return 418; }")
        #expect(a.port != b.port)
        #expect(try curl([a.url("name.txt").absoluteString]).stdout == "first")
        #expect(try curl([b.url("name.txt").absoluteString]).stdout == "second")
        #expect(try curl(["-o", "/dev/null", "-w", "%{http_code}", b.url("teapot").absoluteString]).stdout == "418")
        #expect(try curl(["-o", "/dev/null", "-w", "%{http_code}", a.url("teapot").absoluteString]).stdout == "404")
    }

    @Test func nginxLeavesNoProcessBehind() throws {
        let site = try TemporaryDirectory()
        let server = try NginxServer(documentRoot: site.path)
        let master = try #require(server.masterPID)
        // The master forks its worker just after it starts listening: give it a moment.
        var workers = childProcesses(of: master)
        for _ in 0..<400 where workers.isEmpty {
            usleep(5_000)
            workers = childProcesses(of: master)
        }
        #expect(!workers.isEmpty)
        server.stop()
        server.stop()
        #expect(!processIsAlive(master))
        #expect(workers.allSatisfy { !processIsAlive($0) })

        var dropped: pid_t = 0
        do {
            let scoped = try NginxServer(documentRoot: site.path)
            dropped = try #require(scoped.masterPID)
        }
        #expect(dropped != 0 && !processIsAlive(dropped))
    }

    // MARK: - FaultServer

    @Test func faultServerServesRangesAndHonoursIfRange() throws {
        let (site, server) = try faultServer(size: 5_000)
        defer { server.stop() }
        let url = server.url("file.bin").absoluteString
        let output = try TemporaryDirectory()

        let full = try curl(["-D", output.path("headers"), "-o", output.path("full"), url])
        #expect(full.status == 0)
        #expect(
            FileManager.default.contents(atPath: output.path("full"))
                == FileManager.default.contents(atPath: site.path("file.bin")))
        let headers = try String(contentsOfFile: output.path("headers"), encoding: .utf8)
        let etag = try #require(headerValue("etag", in: headers))
        #expect(etag.hasPrefix("\"") && etag.count == 18)

        let resumed = try curl([
            "-r", "4000-", "-H", "If-Range: \(etag)", "-w", "%{http_code} %{size_download}", "-o", "/dev/null", url,
        ])
        #expect(resumed.stdout == "206 1000")
        let stale = try curl([
            "-r", "4000-", "-H", "If-Range: \"other\"", "-w", "%{http_code} %{size_download}", "-o", "/dev/null", url,
        ])
        #expect(stale.stdout == "200 5000")
        let missing = try curl(["-w", "%{http_code}", "-o", "/dev/null", server.url("nothing.bin").absoluteString])
        #expect(missing.stdout == "404")

        let recorded = server.requests(for: "file.bin")
        try #require(recorded.count == 3)
        #expect(recorded[1].headers["range"] == "bytes=4000-" && recorded[1].headers["if-range"] == etag)
        #expect(recorded.map(\.status) == [200, 206, 200] && recorded.map(\.bodyBytesSent) == [5_000, 1_000, 5_000])
    }

    /// A failure mid-body, and the curl exit status that shows it happened.
    struct BodyFault: Sendable, CustomTestStringConvertible {
        var behaviour: FaultBehaviour
        var curlArguments: [String]
        var curlStatus: Int32
        var testDescription: String { "\(behaviour) → curl \(curlStatus)" }
    }

    @Test(arguments: [
        BodyFault(behaviour: .truncateAfter(bytes: 1_234), curlArguments: [], curlStatus: 18),  // partial file
        BodyFault(behaviour: .resetAfter(bytes: 1_234), curlArguments: [], curlStatus: 56),  // receive error
        BodyFault(
            // curl averages speed over the last 5 s: a high limit makes it give up about 1 s after
            // the burst instead of 5 s later.
            behaviour: .stall(afterBytes: 1_234, seconds: 10),
            curlArguments: ["--speed-limit", "100000", "--speed-time", "1"],
            curlStatus: 28),  // too slow
    ])
    func faultServerBreaksABodyMidway(fault: BodyFault) throws {
        let (site, server) = try faultServer(size: 50_000)
        defer { server.stop() }
        server.script("/file.bin", [fault.behaviour])
        let output = try TemporaryDirectory()
        let broken = try curl(
            fault.curlArguments + ["-o", output.path("broken"), server.url("file.bin").absoluteString])
        #expect(broken.status == fault.curlStatus, "\(broken.stderr)")
        let received = FileManager.default.contents(atPath: output.path("broken")) ?? Data()
        let original = try #require(FileManager.default.contents(atPath: site.path("file.bin")))
        #expect(received == original.prefix(1_234))

        // The script is used up: the next request is normal.
        let retry = try curl([
            "-o", "/dev/null", "-w", "%{http_code} %{size_download}", server.url("file.bin").absoluteString,
        ])
        #expect(retry.stdout == "200 50000")
        #expect(server.requests.map(\.behaviour) == [fault.behaviour, .normal])
        #expect(server.requests.map(\.bodyBytesSent) == [1_234, 50_000])
    }

    @Test func faultServerAnswersScriptedStatusesAndRedirects() throws {
        let (site, server) = try faultServer(size: 100)
        defer { withExtendedLifetime(site) {} }
        defer { server.stop() }
        server.script("file.bin", [.status(503, retryAfter: "7"), .status(500), .redirect(to: "/file.bin")])
        let url = server.url("file.bin?attempt").absoluteString

        let unavailable = try curl(["-i", url])
        #expect(unavailable.stdout.hasPrefix("HTTP/1.1 503 "))
        #expect(headerValue("retry-after", in: unavailable.stdout) == "7")
        let failing = try curl(["-o", "/dev/null", "-w", "%{http_code}", "--fail", url])
        #expect(failing.status == 22 && failing.stdout == "500")
        let redirected = try curl([
            "-L", "-o", "/dev/null", "-w", "%{http_code} %{num_redirects} %{size_download}", url,
        ])
        #expect(redirected.stdout == "200 1 100")

        let recorded = server.requests
        #expect(recorded.map(\.status) == [503, 500, 302, 200])
        #expect(recorded.allSatisfy { $0.path == "/file.bin" && $0.method == "GET" })
        #expect(
            recorded[0].target == "/file.bin?attempt" && recorded[0].headers["user-agent"]?.hasPrefix("curl/") == true)
    }

    // MARK: - SiteBuilder

    @Test func treeHashFromCoreutilsMatchesSwiftAndTreeHash() throws {
        let site = try TemporaryDirectory()
        // Names whose byte order differs from naive orders: "." (0x2e) sorts before "/" (0x2f),
        // capitals before lowercase, multi-byte UTF-8 last; plus spaces and an empty file.
        let files: [String: String] = [
            "b.txt": "b", "a/z.txt": "z", "a.b": "dot", "A.txt": "capital", "é.txt": "accent",
            "sub dir/x y.txt": "spaces", "empty": "", "a/b/c/deep.js": "deep",
        ]
        for (path, text) in files { try site.write(text, to: path) }
        try site.makeDirectory("empty-folder")

        // Independently of TreeHash: the listing of docs/protocol.md#the-tree-hash, built and hashed here.
        let paths = files.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let listing = paths.map { "\(SHA256.hash(Array(files[$0]!.utf8)).hex)  \($0)\n" }.joined()
        let expected = SHA256.hash(Array(listing.utf8)).hex

        #expect(try treeHash(of: site.path) == expected)
        let treeFiles = Dictionary(uniqueKeysWithValues: files.map {
            (PackagePath($0.key), TreeFile(sha256: SHA256.hash(Array($0.value.utf8)).hex, size: Int64($0.value.utf8.count)))
        })
        #expect(TreeHash.compute(treeFiles) == expected)
    }

    @Test(arguments: BsdtarFormat.allCases)
    func archivesFromBsdtarUnpackToTheSameTree(format: BsdtarFormat) throws {
        let work = try TemporaryDirectory()
        try writeSite(
            [
                SiteFile("index.html", "<h1>hi</h1>"), SiteFile("js/app.js", "run()"),
                SiteFile("img/x.bin", bytes: pattern(3_000)),
            ], to: work.path("site"))
        let archive = work.path("site.\(format.fileExtension)")
        try makeArchive(of: work.path("site"), to: archive, format: format)

        let listing = try run("bsdtar", ["-tf", archive]).checked()
        let members = listing.stdout.split(separator: "\n").map(String.init)
        #expect(members.contains("./js/app.js"))
        // In path order whatever order the file system lists the folder in (tmpfs: newest first).
        #expect(members == members.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }, "\(members)")
        let bytes = try #require(FileManager.default.contents(atPath: archive))
        #expect(try sha256(ofFile: archive) == SHA256.hash([UInt8](bytes)).hex)
        #expect(try fileSize(archive) == bytes.count)

        try FileManager.default.createDirectory(atPath: work.path("unpacked"), withIntermediateDirectories: false)
        let unpacked = try ArchiveUnpacker(limits: UnpackLimits(), archiveName: "site").unpack(
            archivePath: archive, into: work.path("unpacked"))
        #expect(Set(unpacked.files.keys) == ["index.html", "js/app.js", "img/x.bin"])
        #expect(TreeHash.compute(unpacked.files) == (try treeHash(of: work.path("site"))))
    }

    @Test func manifestFromSiteBuilderParses() throws {
        let work = try TemporaryDirectory()
        let home = try buildPackage(
            id: "home", version: "1.4.2", routes: ["https://m.example.com/home/"],
            files: [SiteFile("index.html", "home")], site: work.path("sites/home"), repo: work.path("repo"))
        let manifestPath = work.path("repo/manifest.json")
        let written = try writeManifest(
            packages: [home], sequence: 42, expires: "2099-01-31T00:00:00Z", to: manifestPath)

        let manifest = try Manifest(parsing: written, source: manifestPath)
        #expect(manifest.sequence == 42)
        let package = try #require(manifest.packages.first)
        #expect(package.id == "home" && package.version == "1.4.2" && package.entry == "index.html")
        #expect(package.archive.url == "archives/home-1.4.2.tar.gz")
        #expect(package.archive.sha256 == (try sha256(ofFile: work.path("repo/archives/home-1.4.2.tar.gz"))))
        #expect(package.tree == (try treeHash(of: work.path("sites/home"))))
        // Sorted keys: "archive" is written before "format" and "id".
        let text = String(decoding: written, as: UTF8.self)
        let archiveKey = try #require(text.range(of: "\"archive\""))
        let idKey = try #require(text.range(of: "\"id\""))
        #expect(archiveKey.lowerBound < idKey.lowerBound)
    }

    // MARK: - Fixtures

    @Test func fixturesAreFoundAndCopied() throws {
        #expect(FileManager.default.fileExists(atPath: Fixtures.root.appendingPathComponent("README.md").path))
        let work = try TemporaryDirectory()
        let copy = try Fixtures.copy("sample-site", to: work.path)
        #expect(copy == work.path("sample-site"))
        // The value Fixtures/README.md records for this fixture.
        #expect(try treeHash(of: copy) == "9d8d83c2866189f1f635edca410f5957823702966ecb262e1dc3221ab41c002f")
        #expect(throws: TestSupportError.self) { try Fixtures.copy("no-such-fixture", to: work.path) }
    }

    // MARK: - Helpers

    private func curl(_ arguments: [String]) throws -> ProcessResult {
        try run("curl", ["--silent", "--show-error", "--max-time", "10"] + arguments, timeout: 15)
    }

    /// Bytes that differ from position to position, so an offset mistake shows.
    private func pattern(_ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
    }

    private func faultServer(size: Int) throws -> (TemporaryDirectory, FaultServer) {
        let site = try TemporaryDirectory()
        try site.write(pattern(size), to: "file.bin")
        return (site, try FaultServer(documentRoot: site.path, maxLifetime: 30))
    }

    /// The value of header `name` (case-insensitive) in a curl `-i`/`-I`/`-D` dump.
    private func headerValue(_ name: String, in response: String) -> String? {
        for line in response.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == name { return parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}
