import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

@Suite struct PublisherTests {
    @Test(arguments: ArchiveFormat.allCases)
    func sameFolderPublishedTwiceGivesByteIdenticalArchives(format: ArchiveFormat) throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-reproducible")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("a/v1"))
        try writeSite(DemoSite.files(version: 2), to: scratch.path("a/v2"))
        // The second copy differs in everything but content: times, modes, owner, creation order.
        try shell(
            """
            cp -r '\(scratch.path("a"))' '\(scratch.path("b"))'
            find '\(scratch.path("b"))' -exec touch -d '2001-02-03 04:05:06' {} +
            chmod 600 '\(scratch.path("b"))/v1/index.html'; chmod 700 '\(scratch.path("b"))/v1/img'
            chown -R 1234:1234 '\(scratch.path("b"))' 2>/dev/null || true
            """)
        var outputs = [[String: [UInt8]]]()
        for copy in ["a", "b"] {
            let repo = scratch.path("repo-\(copy)")
            let publisher = Publisher(repository: URL(fileURLWithPath: repo))
            _ = try publisher.publish(DemoSite.request(site: scratch.path("\(copy)/v1"), version: 1, format: format))
            let v2 = try publisher.publish(DemoSite.request(site: scratch.path("\(copy)/v2"), version: 2, format: format))
            #expect(v2.deltas.count == 1)
            var files = [String: [UInt8]]()
            TreeWalker.regularFiles(in: repo + "/archives") { files[$0.string] = try? FileSystem.read(repo + "/archives/" + $0.string) }
            outputs.append(files)
        }
        #expect(
            outputs[0].keys.sorted() == [
                "app/1.0/app-1.0.\(format.rawValue)", "app/2.0/app-1.0-to-2.0.delta.\(format.rawValue)",
                "app/2.0/app-2.0.\(format.rawValue)",
            ])
        #expect(outputs[0] == outputs[1])

        // What the entries carry, as bsdtar reads them: root owner, fixed modes, epoch mtime, sorted.
        let listing = try shell(
            "bsdtar -tvf '\(scratch.path("repo-b"))/archives/app/1.0/app-1.0.\(format.rawValue)' | awk '{print $1, $3, $4, $6, $7, $8, $9}'"
        )
        let lines = listing.split(separator: "\n")
        #expect(lines.contains("drwxr-xr-x 0 0 Jan 1 1970 img/"))
        #expect(lines.contains("-rw-r--r-- 0 0 Jan 1 1970 index.html"))
        let paths = lines.map { String($0.split(separator: " ").last!) }
        #expect(paths == paths.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        if format != .zip {
            let raw = try shell("bsdcat '\(scratch.path("repo-b"))/archives/app/1.0/app-1.0.\(format.rawValue)' | strings")
            #expect(!raw.contains("atime") && !raw.contains("ctime") && !raw.contains("root"))
        }
        if format == .tarGzip {
            // gzip header bytes 4-7: MTIME, zero when absent.
            let header = try FileSystem.read(scratch.path("repo-b") + "/archives/app/1.0/app-1.0.tar.gz").prefix(8)
            #expect(Array(header.suffix(4)) == [0, 0, 0, 0])
        }
    }

    @Test func publishKeepsTheRestOfTheManifestAsItWas() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-untouched")
        let repo = scratch.path("repo")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        let original = """
            {
              "format": 1, "sequence": 41, "expires": "2099-01-01T00:00:00Z", "x-publisher": {"team": "web", "build": 7},
              "packages": [
                {"id": "docs", "version": "9", "routes": ["https://m.example.com/docs/"],
                 "archive": {"url": "https://cdn.example.com/docs-9.tar.gz", "sha256": "\(String(repeating: "a", count: 64))", "size": 12, "x-mirror": "eu"},
                 "tree": "\(String(repeating: "b", count: 64))", "x-owner": "docs-team", "rollout": 50, "fallback": "index.html"},
                {"id": "app", "version": "0.9", "routes": ["https://m.example.com/app/"],
                 "archive": {"url": "archives/app-0.9.tar.gz", "sha256": "\(String(repeating: "c", count: 64))", "size": 34},
                 "tree": "\(String(repeating: "d", count: 64))"}
              ]
            }
            """
        try writeSite(["manifest.json": Array(original.utf8)], to: repo)
        let report = try Publisher(repository: URL(fileURLWithPath: repo)).publish(
            DemoSite.request(site: scratch.path("site"), version: 1))
        #expect(report.sequence == 42)

        let before = try JSONSerialization.jsonObject(with: Data(original.utf8)) as! NSDictionary
        let after = try JSONSerialization.jsonObject(with: Data(FileSystem.read(repo + "/manifest.json"))) as! NSDictionary
        #expect(after["sequence"] as? Int == 42)
        for key in ["format", "x-publisher"] { #expect(after[key] as? NSObject == before[key] as? NSObject, "\(key)") }
        // An expiry belongs to the publish that set it (docs/publishing.md, "Expiry"): a later publish without one writes none.
        #expect(after["expires"] == nil)
        let packagesBefore = before["packages"] as! [NSDictionary]
        let packagesAfter = after["packages"] as! [NSDictionary]
        #expect(packagesAfter.count == 2)
        #expect(packagesAfter[0] == packagesBefore[0])  // docs, unknown fields and all
        #expect(packagesAfter[1]["version"] as? String == "1.0")  // app replaced in place
        #expect(packagesAfter[1]["tree"] as? String == report.tree)
        let manifest = try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "test")
        #expect(manifest.packages.map(\.id) == ["docs", "app"])
    }

    /// Two packages released by two CI steps at once: the second publish waits for the first instead of
    /// reading the manifest before the first writes it and dropping its package.
    @Test func aPublishWaitsForTheOneHoldingTheRepository() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-publish-lock")
        let repo = scratch.path("repo")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        try FileSystem.makeDirectories(repo)
        var holder = try FileLock(path: repo + "/.publish.lock", wait: false)
        try #require(holder != nil)

        let waiting = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let result = Mutex<Result<PublishReport, any Error>?>(nil)
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        let request = DemoSite.request(site: scratch.path("site"), version: 1)
        Thread.detachNewThread {
            let outcome = Result { try publisher.publish(request, waiting: { waiting.signal() }) }
            result.withLock { $0 = outcome }
            finished.signal()
        }
        #expect(waiting.wait(timeout: .now() + 30) == .success, "the publish did not report that it waits")
        #expect(finished.wait(timeout: .now() + 0.3) == .timedOut, "the publish went on while the repository was held")
        #expect(!FileSystem.exists(repo + "/manifest.json"))

        holder = nil
        _ = holder
        #expect(finished.wait(timeout: .now() + 30) == .success)
        let report = try #require(try result.withLock { try $0?.get() })
        #expect(report.sequence == 1)
        #expect(try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "test").packages.map(\.id) == ["app"])
    }

    @Test func concurrentPublishesOfTwoPackagesKeepBoth() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-publish-concurrent")
        let repo = scratch.path("repo")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        let ids = ["one", "two", "three", "four"]
        DispatchQueue.concurrentPerform(iterations: ids.count) { index in
            var request = DemoSite.request(site: scratch.path("site"), version: 1)
            request.id = ids[index]
            request.routes = ["https://m.example.com/\(ids[index])/"]
            #expect(throws: Never.self) { try Publisher(repository: URL(fileURLWithPath: repo)).publish(request) }
        }
        let manifest = try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "test")
        #expect(manifest.sequence == 4)
        #expect(Set(manifest.packages.map(\.id)) == Set(ids))
    }

    @Test func republishingTheSameContentIsAllowedAndChangesOnlyTheEntry() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-republish")
        let repo = scratch.path("repo")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        let first = try publisher.publish(DemoSite.request(site: scratch.path("site"), version: 1))
        var request = DemoSite.request(site: scratch.path("site"), version: 1)
        request.rollout = 10
        let again = try publisher.publish(request)
        #expect(again.republished && !first.republished)
        #expect(again.sequence == 2 && again.archive == first.archive && again.deltas.isEmpty)
        let manifest = try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "test")
        #expect(manifest.packages.first?.rollout == 10)
    }

    @Test func deltaNotSmallerThanTheFullArchiveIsSkipped() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-skip-delta")
        let repo = scratch.path("repo")
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        try writeSite(["index.html": content("one", size: 5000)], to: scratch.path("v1"))
        try writeSite(["index.html": content("two", size: 5000)], to: scratch.path("v2"))
        _ = try publisher.publish(DemoSite.request(site: scratch.path("v1"), version: 1))
        let v2 = try publisher.publish(DemoSite.request(site: scratch.path("v2"), version: 2))
        #expect(v2.deltas.isEmpty)
        #expect(v2.skippedDeltas.map(\.from) == ["1.0"])
        #expect(!FileSystem.exists(repo + "/archives/app/2.0/app-1.0-to-2.0.delta.tar.zst"))
    }

    // MARK: Refusals

    /// docs/protocol.md#package-entries: a package without its default entry file (a JS library) is published with a warning; an
    /// entry the publisher named (`requireEntry`, `--entry`) must be there.
    @Test func aMissingDefaultEntryIsAWarningAndANamedOneARefusal() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refuse-entry")
        try writeSite(["mathjax.js": Array("x".utf8)], to: scratch.path("site"))
        let repo = scratch.path("repo")
        let report = try Publisher(repository: URL(fileURLWithPath: repo)).publish(
            DemoSite.request(site: scratch.path("site"), version: 1))
        #expect(report.warnings.count == 1)
        #expect(report.warnings.first?.contains("entry file index.html is not in the site") == true)
        #expect(FileSystem.exists(repo + "/manifest.json"))

        var named = DemoSite.request(site: scratch.path("site"), version: 2)
        named.requireEntry = true
        #expect {
            try Publisher(repository: URL(fileURLWithPath: repo)).publish(named)
        } throws: { error in
            "\(error)".contains("entry file index.html is not in the site")
        }
    }

    @Test func sameVersionWithOtherContentIsRefused() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refuse-version")
        let repo = scratch.path("repo")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("v1"))
        try writeSite(DemoSite.files(version: 2), to: scratch.path("v2"))
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        let first = try publisher.publish(DemoSite.request(site: scratch.path("v1"), version: 1))
        let archiveBefore = try FileSystem.read(repo + "/" + first.archive.url)
        let manifestBefore = try FileSystem.read(repo + "/manifest.json")
        #expect {
            try publisher.publish(DemoSite.request(site: scratch.path("v2"), version: 1))
        } throws: { error in
            "\(error)".contains("app 1.0 was already published with other content")
        }
        #expect(try FileSystem.read(repo + "/" + first.archive.url) == archiveBefore)
        #expect(try FileSystem.read(repo + "/manifest.json") == manifestBefore)
    }

    @Test(arguments: [("symlink", "is a symbolic link"), ("fifo", "is not a regular file or folder")])
    func siteWithSomethingOtherThanFilesAndFoldersIsRefused(kind: String, message: String) throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refuse-link")
        try writeSite(["index.html": Array("x".utf8), "js/app.js": Array("y".utf8)], to: scratch.path("site"))
        let bad = scratch.path("site") + "/js/bad"
        try shell(kind == "symlink" ? "ln -s /etc/passwd '\(bad)'" : "mkfifo '\(bad)'")
        #expect {
            try Publisher(repository: URL(fileURLWithPath: scratch.path("repo"))).publish(
                DemoSite.request(site: scratch.path("site"), version: 1))
        } throws: { error in
            "\(error)".contains("\(bad) \(message)")
        }
    }

    @Test func routeOwnedByAnotherPackageIsRefused() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refuse-route")
        let repo = scratch.path("repo")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        _ = try publisher.publish(DemoSite.request(site: scratch.path("site"), version: 1))
        var other = DemoSite.request(site: scratch.path("site"), version: 1)
        other.id = "other"
        other.routes = ["http://m.example.com/app/"]  // the same prefix as devices compare it (http and https alike)
        #expect {
            try publisher.publish(other)
        } throws: { error in
            "\(error)".contains("belongs to package \"app\"")
        }
    }

    @Test(arguments: [
        ("App", "1.0"), ("-app", "1.0"), ("app", "1.0 beta"), ("app", ""), ("app", String(repeating: "1", count: 65)),
    ])
    func badIDOrVersionIsRefused(id: String, version: String) throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refuse-id")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        var request = DemoSite.request(site: scratch.path("site"), version: 1)
        request.id = id
        request.version = version
        #expect(throws: OfflinePkgError.self) {
            try Publisher(repository: URL(fileURLWithPath: scratch.path("repo"))).publish(request)
        }
        #expect(!FileSystem.exists(scratch.path("repo")))
    }

    @Test func idsAndVersionsThatLookAlikeGetTheirOwnArchives() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-publish-names")
        let repo = scratch.path("repo")
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        try writeSite(["index.html": Array("app 1-2".utf8)], to: scratch.path("a"))
        try writeSite(["index.html": Array("app-1 2".utf8)], to: scratch.path("b"))
        let first = try publisher.publish(
            PublishRequest(site: scratch.path("a"), id: "app", version: "1-2", routes: ["https://m.example.com/a/"]))
        let second = try publisher.publish(
            PublishRequest(site: scratch.path("b"), id: "app-1", version: "2", routes: ["https://m.example.com/b/"]))
        #expect(first.archive.url != second.archive.url)
        #expect(try FileHasher.sha256(ofFile: repo + "/" + first.archive.url) == first.archive.sha256)
        #expect(try FileHasher.sha256(ofFile: repo + "/" + second.archive.url) == second.archive.sha256)
    }
}
