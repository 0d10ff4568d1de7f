import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The sync engine against a real nginx on loopback (and a scripted fault server for what nginx cannot
/// do): the all-or-nothing release of docs/protocol.md#switching, diffing, and download faults.
@Suite("Sync engine")
struct SyncEngineTests {
    static let home = [
        SiteFile("index.html", "<h1>home v1</h1>"), SiteFile("js/app.js", "console.log(1)"), SiteFile("css/a.css", "body{}"),
    ]
    static let docs = [SiteFile("index.html", "<h1>docs</h1>"), SiteFile("guide/index.html", "<p>guide</p>")]

    struct Device {
        let root: TemporaryDirectory
        let store: PackageStore

        init() throws {
            root = try TemporaryDirectory(prefix: "offlinepkg-device")
            store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        }

        func sync(_ url: URL, _ options: Updater.Options = .init(retry: .init(attempts: 3, baseDelay: 0.05))) async throws
            -> SyncReport
        {
            try await Updater(store: store, manifestURL: url, options: options).sync()
        }

        func content(_ url: String) throws -> String? {
            guard let hit = store.resolve(url) else { return nil }
            return try String(contentsOfFile: hit.path, encoding: .utf8)
        }
    }

    static func twoPackages() throws -> TestRepository {
        let repo = try TestRepository()
        try repo.add("home", "1.0", routes: ["https://m.example.com/"], files: home)
        try repo.add("docs", "1.0", routes: ["https://m.example.com/docs/"], files: docs)
        try repo.publish()
        return repo
    }

    @Test func coldSyncInstallsEveryPackageAndLookupsAnswer() async throws {
        let repo = try Self.twoPackages()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        let report = try await device.sync(nginx.url("manifest.json"))
        #expect(report.outcome == .activated)
        #expect(Set(report.changes.map(\.id)) == ["home", "docs"])
        #expect(report.bytesFetched == Int64(try fileSize(repo.archivePath("home")) + fileSize(repo.archivePath("docs"))))
        #expect(try device.content("https://m.example.com/js/app.js") == "console.log(1)")
        #expect(try device.content("https://M.EXAMPLE.COM/docs/guide/") == "<p>guide</p>")
        // The installed trees are byte-for-byte the sites, by the coreutils tree hash.
        for (id, _) in [("home", 0), ("docs", 0)] {
            let hit = try #require(
                device.store.resolve(id == "home" ? "https://m.example.com/index.html" : "https://m.example.com/docs/index.html"))
            let tree = URL(fileURLWithPath: hit.path).deletingLastPathComponent().path
            #expect(try treeHash(of: tree) == treeHash(of: repo.site(id, "1.0")))
        }
        // A second sync is a no-op: one conditional request, answered 304.
        let again = try await device.sync(nginx.url("manifest.json"))
        #expect(again.outcome == .notModified)
        let log = nginx.waitForRequests(4)
        #expect(log.last?.status == 304 && log.last?.ifNoneMatch != nil)
    }

    @Test func updatingOnePackageLeavesTheOthersUnrequested() async throws {
        let repo = try Self.twoPackages()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        _ = try await device.sync(nginx.url("manifest.json"))
        try repo.add("home", "2.0", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "<h1>home v2</h1>")])
        try repo.publish()
        let report = try await device.sync(nginx.url("manifest.json"))
        // The one package fetched cost what the whole sync fetched.
        #expect(report.bytesFetched > 0)
        #expect(report.changes == [.init(id: "home", from: "1.0", to: "2.0", via: .archive, bytes: report.bytesFetched)])
        #expect(try device.content("https://m.example.com/") == "<h1>home v2</h1>")
        #expect(device.store.resolve("https://m.example.com/js/app.js") == nil)
        #expect(nginx.requestCount(path: "/archives/docs-1.0.tar.gz") == 1)
        #expect(nginx.requestCount(path: "/archives/home-2.0.tar.gz") == 1)
        #expect(device.store.activeSet.generation == 2)
        // The previous set is kept for rollback: home 1.0's tree stays beside 2.0's. (That a tree older
        // than the previous set is collected is `SyncCollectionTests`' to show: here there is none.)
        let homeTrees = try FileManager.default.contentsOfDirectory(atPath: device.root.path("trees/home"))
            .filter { !$0.hasSuffix(".index") && !$0.hasSuffix(".lookup") }.sorted()
        #expect(homeTrees.count == 2 && homeTrees[0].hasPrefix("1.0-") && homeTrees[1].hasPrefix("2.0-"), "\(homeTrees)")
    }

    @Test func aPackageDroppedFromTheManifestStopsResolving() async throws {
        let repo = try Self.twoPackages()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        _ = try await device.sync(nginx.url("manifest.json"))
        repo.remove("docs")
        try repo.publish()
        let report = try await device.sync(nginx.url("manifest.json"))
        #expect(report.changes == [.init(id: "docs", from: "1.0", to: nil, via: nil)])
        #expect(device.store.resolve("https://m.example.com/docs/") == nil)
        // The longest route is gone, so home's routes now answer that prefix (and have no such file).
        #expect(try device.content("https://m.example.com/") == "<h1>home v1</h1>")
    }

    @Test func aCorruptArchiveLeavesTheActiveSetAndTheNextSyncFetchesOnlyIt() async throws {
        let repo = try Self.twoPackages()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        _ = try await device.sync(nginx.url("manifest.json"))
        let before = try String(contentsOfFile: device.root.path("active.json"), encoding: .utf8)

        try repo.add("home", "2.0", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "v2")])
        try repo.add("docs", "2.0", routes: ["https://m.example.com/docs/"], files: [SiteFile("index.html", "docs v2")])
        try repo.publish()
        // Damage home's archive on the server after its hash went into the manifest.
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: repo.archivePath("home"))))
        bytes[bytes.count / 2] ^= 0xff
        try Data(bytes).write(to: URL(fileURLWithPath: repo.archivePath("home")))

        await #expect {
            try await device.sync(nginx.url("manifest.json"))
        } throws: { error in
            guard case .hashMismatch(let what, _, _) = error as? OfflinePkgError else { return false }
            return what == "archives/home-2.0.tar.gz" && (error as! OfflinePkgError).category == .refused
        }
        #expect(try String(contentsOfFile: device.root.path("active.json"), encoding: .utf8) == before)
        #expect(try device.content("https://m.example.com/") == "<h1>home v1</h1>")
        #expect(try device.content("https://m.example.com/docs/") == "<h1>docs</h1>")

        // The fix: the publisher rebuilds the archive. Only home is fetched again; docs 2.0 was kept.
        try repo.add("home", "2.0", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "v2")])
        try repo.publish()
        let report = try await device.sync(nginx.url("manifest.json"))
        #expect(report.outcome == .activated)
        #expect(nginx.requestCount(path: "/archives/docs-2.0.tar.gz") == 1)
        #expect(nginx.requestCount(path: "/archives/home-2.0.tar.gz") == 2)
        #expect(try device.content("https://m.example.com/") == "v2")
        #expect(try device.content("https://m.example.com/docs/") == "docs v2")
    }

    @Test func anArchiveThatUnpacksToAnotherTreeIsRefusedAndLeavesNoTrace() async throws {
        let repo = try Self.twoPackages()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        _ = try await device.sync(nginx.url("manifest.json"))
        let active = try Data(contentsOf: URL(fileURLWithPath: device.root.path("active.json")))
        let trees = try FileManager.default.subpathsOfDirectory(atPath: device.root.path("trees")).sorted()

        // A good archive (its sha256 and size match), under a manifest that promises home 1.0's tree.
        try repo.add("home", "2.0", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "v2")])
        let promised = try treeHash(of: repo.site("home", "1.0"))
        repo.edit("home") { $0["tree"] = promised }
        try repo.publish()

        let error = try #require(
            await #expect(throws: OfflinePkgError.self) { try await device.sync(nginx.url("manifest.json")) })
        let actual = try treeHash(of: repo.site("home", "2.0"))
        #expect(error == .treeMismatch(package: "home 2.0", expected: promised, actual: actual))
        #expect(error.category == .refused)
        #expect("\(error)".hasPrefix("tree hash mismatch for package home 2.0: expected \(promised)"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: device.root.path("active.json"))) == active)
        // The unpacked tree went nowhere: trees/ holds what it held, and its staging folder is gone.
        #expect(try FileManager.default.subpathsOfDirectory(atPath: device.root.path("trees")).sorted() == trees)
        #expect(try FileManager.default.contentsOfDirectory(atPath: device.root.path("staging")).isEmpty)
        #expect(try device.content("https://m.example.com/") == "<h1>home v1</h1>")
    }

    /// The manifest's size against the file the server has: refused (exit 4) from the response's declared
    /// length, before the body, and not retried, over http and from a file: repository alike.
    @Test(arguments: [("larger", "http"), ("smaller", "http"), ("larger", "file"), ("smaller", "file")])
    func aSizeThatDoesNotMatchIsRefused(_ kind: String, _ scheme: String) async throws {
        let repo = try Self.twoPackages()
        var actual = 0
        var promised = 0
        repo.edit("home") { entry in
            var archive = entry["archive"] as! [String: Any]
            actual = archive["size"] as! Int
            promised = actual + (kind == "larger" ? 100 : -10)
            archive["size"] = promised
            entry["archive"] = archive
        }
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        let manifest = scheme == "http" ? nginx.url("manifest.json") : URL(fileURLWithPath: repo.manifestPath)
        await #expect {
            try await device.sync(manifest, .init(retry: .init(attempts: 4, baseDelay: 0.05)))
        } throws: { error in
            (error as? OfflinePkgError)?.category == .refused
                && "\(error)".contains(
                    "size check refused \(repo.archiveURL("home")): the server's file is \(actual) bytes, the manifest promised \(promised)"
                )
        }
        if scheme == "http" { #expect(nginx.requestCount(path: "/" + repo.archiveURL("home")) == 1) }
        #expect(device.store.activeSet.generation == 0)
    }

    @Test func serverFaultsAreRetriedUntilTheDownloadSucceeds() async throws {
        let repo = try Self.twoPackages()
        let server = try FaultServer(documentRoot: repo.path)
        server.script("/archives/home-1.0.tar.gz", [.status(500), .resetAfter(bytes: 100), .truncateAfter(bytes: 50)])
        server.script("/archives/docs-1.0.tar.gz", [.status(503, retryAfter: "0"), .stall(afterBytes: 10, seconds: 3)])
        let device = try Device()
        let report = try await device.sync(
            server.url("manifest.json"), .init(stallTimeout: 1, retry: .init(attempts: 4, baseDelay: 0.05)))
        #expect(report.outcome == .activated)
        #expect(server.requests(for: "/archives/home-1.0.tar.gz").count == 4)
        #expect(server.requests(for: "/archives/docs-1.0.tar.gz").count == 3)
        #expect(try device.content("https://m.example.com/js/app.js") == "console.log(1)")
    }

    @Test func aNotFoundIsNotRetriedAndNamesTheURL() async throws {
        let repo = try Self.twoPackages()
        try FileManager.default.removeItem(atPath: repo.archivePath("docs"))
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        await #expect {
            try await device.sync(nginx.url("manifest.json"))
        } throws: { error in
            "\(error)".contains("archives/docs-1.0.tar.gz failed: HTTP status 404")
                && (error as? OfflinePkgError)?.category == .failure
        }
        #expect(nginx.requestCount(path: "/archives/docs-1.0.tar.gz") == 1)
        // home was fetched and verified, and is kept for the next attempt.
        #expect(FileManager.default.fileExists(atPath: device.root.path("trees/home")))
        #expect(device.store.activeSet.generation == 0)
    }

    @Test func packagesSharingOneArchiveAreBothInstalled() async throws {
        let repo = try TestRepository()
        let files = [
            SiteFile("index.html", "same"), SiteFile("big.bin", bytes: (0..<2_000_000).map { _ in UInt8.random(in: 0...255) }),
        ]
        try repo.add("one", "1", routes: ["https://m.example.com/one/"], files: files)
        try repo.add("two", "1", routes: ["https://m.example.com/two/"], files: [])
        // The second package's entry points at the first's archive: same URL, sha256 and size.
        let shared = try #require(try Manifest(parsing: Array(repo.publish()), source: "repo").packages.first?.archive)
        repo.edit("two") { entry in
            entry["archive"] = ["url": shared.url, "sha256": shared.sha256, "size": shared.size]
            entry["tree"] = try! Manifest(
                parsing: Array(try! Data(contentsOf: URL(fileURLWithPath: repo.manifestPath))), source: "repo"
            ).packages[0].tree
        }
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let device = try Device()
        let report = try await device.sync(nginx.url("manifest.json"), .init(jobs: 4))
        #expect(report.outcome == .activated)
        #expect(try device.content("https://m.example.com/one/") == "same")
        #expect(try device.content("https://m.example.com/two/") == "same")
    }

    /// `jobs` bounds the archive transfers in flight. The server holds back each archive's last byte for
    /// 0.4 s, so transfers that run side by side overlap whatever the machine's load, and the overlap is
    /// measured at the server.
    @Test(arguments: [1, 4])
    func downloadsRunInParallelUpToTheJobCount(_ jobs: Int) async throws {
        let repo = try TestRepository()
        let ids = ["a", "b", "c", "d"]
        for id in ids {
            try repo.add(id, "1", routes: ["https://m.example.com/\(id)/"], files: [SiteFile("index.html", id)])
        }
        try repo.publish()
        let server = try FaultServer(documentRoot: repo.path)
        let archives = Set(ids.map { "/" + repo.archiveURL($0) })
        for archive in archives { server.script(archive, [.holdLastByte(seconds: 0.4)]) }
        let device = try Device()
        let report = try await device.sync(server.url("manifest.json"), .init(jobs: jobs))
        #expect(report.outcome == .activated)
        let transfers = server.requests.filter { archives.contains($0.path) }
        #expect(transfers.count == 4)
        let most = Self.mostAtOnce(transfers)
        #expect(jobs == 1 ? most == 1 : most > 1, "at most \(most) of 4 archive transfers at once with jobs: \(jobs)")
    }

    /// The most requests in flight at one moment, from reading each to answering it.
    static func mostAtOnce(_ requests: [RecordedRequest]) -> Int {
        // At equal times an answer comes before a request: one that ends as another starts is not overlap.
        let events = requests.flatMap { [($0.receivedAt, 1), ($0.answeredAt, -1)] }.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
        var current = 0
        var most = 0
        for (_, change) in events {
            current += change
            most = max(most, current)
        }
        return most
    }

    @Test func aSecondSyncOfTheSameRootFailsFastWithLocked() async throws {
        let device = try Device()
        let lock = try RootLock(layout: device.store.layout, wait: false)
        await #expect(throws: OfflinePkgError.locked(root: device.store.layout.root)) {
            try await device.sync(URL(fileURLWithPath: "/nonexistent/manifest.json"))
        }
        withExtendedLifetime(lock) {}
    }
}
