import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// The mistakes a publisher makes that would reach every device, refused by `publish` (and `promote`,
/// `remove`) before anything takes a published name, and `remove` to heal a repository that already
/// holds one: all through the real binary, devices syncing from nginx with a trusted key.
@Suite("Publisher mistakes")
struct PublisherMistakesTests {
    /// A signed repository, its key and a device root.
    struct Desk {
        let scratch: TemporaryDirectory
        var repo: String { scratch.path("repo") }
        var root: String { scratch.path("root") }
        var key: String { scratch.path("key") }

        init() async throws {
            scratch = try TemporaryDirectory(prefix: "offlinepkg-mistakes")
            try await InProcessCLI.run(["keygen", key]).checked("keygen")
        }

        /// A site folder `name` holding `files` (path → text); none makes an empty folder.
        func site(_ name: String, _ files: [String: String]) throws -> String {
            let path = scratch.path("sites/\(name)")
            try? FileManager.default.removeItem(atPath: path)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try writeSite(files.map { SiteFile($0.key, $0.value) }, to: path)
            return path
        }

        /// `publish SITE --repo R --id ID --version V --route https://ID.example.com/ --sign-key K` plus
        /// `options`, where SITE holds an index.html saying "ID V" unless `site` names another folder.
        func publish(_ id: String, _ version: String, site: String? = nil, signed: Bool = true, _ options: [String] = [])
            async throws -> ProcessResult
        {
            let folder = try site ?? self.site("\(id)-\(version)", ["index.html": "\(id) \(version)"])
            let result = await InProcessCLI.run(
                [
                    "publish", folder, "--repo", repo, "--id", id, "--version", version, "--route", "https://\(id).example.com/",
                    "--quiet",
                ] + (signed ? ["--sign-key", key + ".key"] : []) + options)
            touchManifest()
            return result
        }

        /// nginx's validators have one-second resolution: each manifest write gets an mtime of its own.
        func touchManifest() {
            let date = Date().addingTimeInterval(Double.random(in: 1...1_000_000))
            for name in ["manifest.json", "manifest.json.minisig"] {
                try? FileManager.default.setAttributes([.modificationDate: date], ofItemAtPath: repo + "/" + name)
            }
        }

        func run(_ arguments: [String]) async -> ProcessResult { await InProcessCLI.run(arguments) }

        func sync(_ url: String, root: String? = nil, _ options: [String] = []) async -> ProcessResult {
            await run(["sync", url, "--root", root ?? self.root, "--trust-key", key + ".pub", "--quiet"] + options)
        }

        /// What the root serves for `https://ID.example.com/`, or nil on a miss.
        func served(_ id: String, root: String? = nil) async throws -> String? {
            let lookup = await run(["lookup", "https://\(id).example.com/", "--root", root ?? self.root])
            guard lookup.status == 0 else { return nil }
            return try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8)
        }

        func manifest() throws -> [String: Any] {
            try jsonObject(String(contentsOfFile: repo + "/manifest.json", encoding: .utf8))
        }

        func entry(_ id: String) throws -> [String: Any]? {
            (try manifest()["packages"] as? [[String: Any]])?.first { $0["id"] as? String == id }
        }

        /// Every file under the repository's published names (all but `.tmp/` and the lock), with its bytes.
        func published() throws -> [String: Data] {
            var files = [String: Data]()
            let enumerator = FileManager.default.enumerator(atPath: repo)
            while let name = enumerator?.nextObject() as? String {
                guard !name.hasPrefix(".tmp"), name != ".publish.lock" else { continue }
                var isFolder: ObjCBool = false
                if FileManager.default.fileExists(atPath: repo + "/" + name, isDirectory: &isFolder), !isFolder.boolValue {
                    files[name] = FileManager.default.contents(atPath: repo + "/" + name)
                }
            }
            return files
        }

        /// What a publisher without `publish`'s checks wrote: package `id` at `version` whose archive
        /// is a tar.zst of no entries (the tree of nothing), put into the manifest by hand with the next
        /// sequence and signed with stock minisign.
        func addEmptyReleaseByHand(_ id: String, _ version: String) throws {
            let name = "archives/\(id)/\(version)/\(id)-\(version).tar.zst"
            try FileManager.default.createDirectory(
                atPath: repo + "/archives/\(id)/\(version)", withIntermediateDirectories: true)
            try OfflinePkgTestSupport.run("bsdtar", ["--zstd", "-cf", repo + "/" + name, "-T", "/dev/null"]).checked("bsdtar")
            let entry = try makeManifestEntry(
                id: id, version: version, routes: ["https://\(id).example.com/"], archivePath: repo + "/" + name,
                archiveURL: name, tree: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            var manifest = try manifest()
            var packages = (manifest["packages"] as? [[String: Any]] ?? []).filter { $0["id"] as? String != id }
            packages.append(entry)
            manifest["packages"] = packages
            manifest["sequence"] = (manifest["sequence"] as? Int ?? 0) + 1
            try JSONSerialization.data(withJSONObject: manifest, options: [.sortedKeys]).write(
                to: URL(fileURLWithPath: repo + "/manifest.json"))
            try OfflinePkgTestSupport.run("minisign", ["-S", "-s", key + ".key", "-m", repo + "/manifest.json"]).checked(
                "minisign -S")
            touchManifest()
        }
    }

    /// The issue's case end to end: an empty site is refused with nothing written; a repository that
    /// already holds an empty release (every device refuses it, and with it home's update in the same
    /// manifest) is healed by `remove`, after which home's update activates.
    @Test func anEmptySiteIsRefusedAndARepositoryHoldingOneIsHealedByRemove() async throws {
        let desk = try await Desk()
        try await desk.publish("home", "1").checked("publish home 1")
        try await desk.publish("docs", "1").checked("publish docs 1")
        let nginx = try NginxServer(documentRoot: desk.repo, locations: "location / { }")
        let url = nginx.url("manifest.json").absoluteString
        try await desk.sync(url).checked("first sync")
        #expect(try await desk.served("home") == "home 1")
        #expect(try await desk.served("docs") == "docs 1")

        let before = try desk.published()
        let refused = try await desk.publish("broken", "1", site: try desk.site("empty", [:]))
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(refused.stderr.contains("holds no file: devices refuse an empty archive"), "\(refused.stderr)")
        #expect(try desk.published() == before, "the refused publish wrote under a published name")

        try await desk.publish("home", "2").checked("publish home 2")
        try desk.addEmptyReleaseByHand("broken", "1")
        let blocked = await desk.sync(url)
        #expect(blocked.status == 4)
        #expect(blocked.stderr.contains("not an archive, or an empty one"), "\(blocked.stderr)")
        #expect(try await desk.served("home") == "home 1", "a release is all or nothing: home 2 waits with it")

        let removed = await desk.run(["remove", "--repo", desk.repo, "--id", "broken", "--sign-key", desk.key + ".key"])
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(removed.stdout.contains("removed broken (1 was offered): devices stop serving it at their next sync"))
        desk.touchManifest()
        #expect(try desk.entry("broken") == nil)
        try OfflinePkgTestSupport.run("minisign", ["-V", "-p", desk.key + ".pub", "-m", desk.repo + "/manifest.json"])
            .checked("the new manifest verifies with stock minisign")
        try await desk.sync(url).checked("the sync after remove")
        #expect(try await desk.served("home") == "home 2")
        #expect(try await desk.served("docs") == "docs 1")
        let history = try await desk.run(["history", "--repo", desk.repo]).checked("history")
        #expect(
            history.stdout.contains("broken (not in the manifest)") && history.stdout.contains("removed"), "\(history.stdout)")
    }

    /// `--disable` keeps the package and holds its release back: a device keeps what it has of it
    /// (docs 1) and takes the other updates; a new publish of the package is taken; `remove` then
    /// makes devices stop serving it.
    @Test func aDisabledReleaseIsNotTakenAndADeviceKeepsWhatItHas() async throws {
        let desk = try await Desk()
        try await desk.publish("home", "1").checked()
        try await desk.publish("docs", "1").checked()
        let nginx = try NginxServer(documentRoot: desk.repo, locations: "location / { }")
        let url = nginx.url("manifest.json").absoluteString
        try await desk.sync(url).checked("first sync")
        try await desk.publish("home", "2").checked()
        try desk.addEmptyReleaseByHand("docs", "2")
        #expect(await desk.sync(url).status == 4)

        let sign = ["--sign-key", desk.key + ".key"]
        try await desk.run(["remove", "--repo", desk.repo, "--id", "docs", "--disable"] + sign).checked("remove --disable")
        desk.touchManifest()
        #expect(try desk.entry("docs")?["disabled"] as? Bool == true)
        let again = try await desk.run(["remove", "--repo", desk.repo, "--id", "docs", "--disable"] + sign).checked()
        #expect(again.stdout.contains("docs 2 is disabled already: nothing written"), "\(again.stdout)")

        let dry = try await desk.run(["sync", url, "--root", desk.root, "--trust-key", desk.key + ".pub", "--dry-run"]).checked()
        #expect(dry.stdout.contains("held back docs 2: disabled by the publisher"), "\(dry.stdout)")
        try await desk.sync(url).checked("sync with docs 2 disabled")
        #expect(try await desk.served("home") == "home 2")
        #expect(try await desk.served("docs") == "docs 1")

        try await desk.publish("docs", "3").checked("a fixed docs")
        #expect(try desk.entry("docs")?["disabled"] == nil, "a new publish writes the entry anew, enabled")
        try await desk.sync(url).checked()
        #expect(try await desk.served("docs") == "docs 3")

        try await desk.run(["remove", "--repo", desk.repo, "--id", "docs"] + sign).checked("remove docs")
        desk.touchManifest()
        try await desk.sync(url).checked()
        #expect(try await desk.served("docs") == nil, "a removed package is no longer served")
        #expect(try await desk.served("home") == "home 2")
        let missing = await desk.run(["remove", "--repo", desk.repo, "--id", "docs"] + sign)
        #expect(missing.status == 1 && missing.stderr.contains("has no package \"docs\""), "\(missing.stderr)")
    }

    @Test func enableTakesTheMarkOffAndDevicesTakeTheRelease() async throws {
        let desk = try await Desk()
        try await desk.publish("home", "1").checked()
        let sign = ["--sign-key", desk.key + ".key"]
        try await desk.run(["remove", "--repo", desk.repo, "--id", "home", "--disable"] + sign).checked()
        let url = desk.repo + "/manifest.json"
        try await desk.sync(url).checked()
        #expect(try await desk.served("home") == nil, "a device without the package does not take a disabled release")
        try await desk.run(["remove", "--repo", desk.repo, "--id", "home", "--enable"] + sign).checked()
        #expect(try desk.entry("home")?["disabled"] == nil)
        try await desk.sync(url).checked()
        #expect(try await desk.served("home") == "home 1")
        let both = await desk.run(["remove", "--repo", desk.repo, "--id", "home", "--enable", "--disable"])
        #expect(both.status == 2)
    }

    @Test func aMissingSiteFolderIsAUsageError() async throws {
        let desk = try await Desk()
        let result = try await desk.publish("home", "1", site: desk.scratch.path("no-such-site"))
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("no site folder at \(desk.scratch.path("no-such-site"))"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: desk.repo))
    }

    @Test func aLowerVersionIsRefusedUnlessAllowed() async throws {
        let desk = try await Desk()
        try await desk.publish("app", "1.3.0").checked()
        let before = try desk.published()
        for lower in ["0.9.0", "1.3.0-rc.1", "1.2.99"] {
            let refused = try await desk.publish("app", lower)
            #expect(refused.status == 4, "\(lower): \(refused.stderr)")
            #expect(refused.stderr.contains("app \(lower) is lower than 1.3.0, published before"), "\(refused.stderr)")
            #expect(refused.stderr.contains("--allow-downgrade"))
        }
        #expect(try desk.published() == before)
        // Dotted numbers compare as numbers, not as text; the same version again is no downgrade.
        try await desk.publish("app", "1.10.0").checked("1.10.0 after 1.3.0")
        try await desk.publish("app", "1.10.0").checked("1.10.0 again")
        #expect(try await desk.publish("app", "1.9.0").status == 4)
        // A version without an order (a git hash) cannot be judged, and is not refused.
        try await desk.publish("app", "g3f2a91c").checked("a version without an order")
        try await desk.publish("app", "0.9.0", ["--allow-downgrade"]).checked("--allow-downgrade")
        #expect(try desk.entry("app")?["version"] as? String == "0.9.0")
    }

    @Test func anUnsignedWriteIntoASignedRepositoryIsRefused() async throws {
        let desk = try await Desk()
        try await desk.publish("app", "1").checked()
        let before = try desk.published()
        let unsigned = try await desk.publish("app", "2", signed: false)
        #expect(unsigned.status == 4, "\(unsigned.stderr)")
        #expect(unsigned.stderr.contains("is signed (manifest.json.minisig)") && unsigned.stderr.contains("--unsign"))
        let staging = desk.scratch.path("staging")
        try await InProcessCLI.run(
            [
                "publish", try desk.site("s", ["index.html": "s"]), "--repo", staging, "--id", "other", "--version", "1",
                "--route",
                "https://other.example.com/", "--quiet",
            ]
        ).checked()
        let promote = await desk.run([
            "promote", "--from", staging, "--to", desk.repo, "--id", "other", "--version", "1", "--quiet",
        ])
        #expect(promote.status == 4, "\(promote.stderr)")
        let remove = await desk.run(["remove", "--repo", desk.repo, "--id", "app"])
        #expect(remove.status == 4, "\(remove.stderr)")
        #expect(try desk.published() == before, "a refused write touched the repository")
        #expect(try await desk.publish("app", "2", ["--unsign"]).status == 2, "--sign-key with --unsign")

        try await desk.publish("app", "2", signed: false, ["--unsign"]).checked("--unsign")
        #expect(!FileManager.default.fileExists(atPath: desk.repo + "/manifest.json.minisig"))
        try await desk.publish("app", "3", signed: false).checked("an unsigned repository takes unsigned publishes")
    }

    @Test func checkRunsTheDevicesChecksAndPublishesNothing() async throws {
        let desk = try await Desk()
        let first = try await desk.publish("app", "1", ["--check"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(!FileManager.default.fileExists(atPath: desk.repo + "/manifest.json"))
        #expect(try desk.published().isEmpty)
        let summary = try await desk.run(
            [
                "publish", try desk.site("app-1", ["index.html": "app 1"]), "--repo", desk.repo, "--id", "app", "--version", "1",
                "--route", "https://app.example.com/", "--check",
            ]
        ).checked()
        #expect(summary.stdout.hasPrefix("check passed: devices would accept app 1 as sequence 1"), "\(summary.stdout)")
        #expect(summary.stdout.contains("nothing was published (--check)"))

        try await desk.publish("app", "1").checked()
        let before = try desk.published()
        try await desk.publish("app", "2", ["--check"]).checked("--check of 2")
        #expect(try desk.published() == before)
        #expect(try await desk.publish("app", "3", site: try desk.site("empty", [:]), ["--check"]).status == 4)
        #expect(try await desk.publish("app", "0.5", ["--check"]).status == 4, "--check refuses what a publish refuses")
        #expect(try desk.published() == before)
    }

    @Test func maxShellVersionHoldsAReleaseBackOnANewerShell() async throws {
        let desk = try await Desk()
        let url = desk.repo + "/manifest.json"
        try await desk.publish("home", "1").checked()
        try await desk.sync(url, ["--shell-version", "3.3"]).checked()
        try await desk.publish("home", "2", ["--max-shell-version", "3.2"]).checked()
        #expect(try desk.entry("home")?["maxShellVersion"] as? String == "3.2")

        let dry = try await desk.run(["sync", url, "--root", desk.root, "--shell-version", "3.3", "--dry-run"]).checked()
        #expect(dry.stdout.contains("held back home 2: needs shell 3.2 or older, this shell is 3.3"), "\(dry.stdout)")
        try await desk.sync(url, ["--shell-version", "3.3"]).checked()
        #expect(try await desk.served("home") == "home 1")
        // 3.2 stands for the 3.2 line: a 3.2.7 shell takes it, as does a sync told no shell version.
        let within = desk.scratch.path("root-3.2.7")
        try await desk.sync(url, root: within, ["--shell-version", "3.2.7"]).checked()
        #expect(try await desk.served("home", root: within) == "home 2")
        let untold = desk.scratch.path("root-untold")
        try await desk.sync(url, root: untold).checked()
        #expect(try await desk.served("home", root: untold) == "home 2")

        let crossed = try await desk.publish("home", "3", ["--min-shell-version", "3.3", "--max-shell-version", "3.2"])
        #expect(crossed.status == 2 && crossed.stderr.contains("above the maximum"), "\(crossed.stderr)")
    }

    @Test func historyJSONHoldsEachEntryAsAnObject() async throws {
        let desk = try await Desk()
        try await desk.publish("app", "1", ["--notes", "first"]).checked()
        let history = try jsonObject(await desk.run(["history", "--repo", desk.repo, "--json"]).checked().stdout)
        let release = try #require(((history["packages"] as? [[String: Any]])?.first?["releases"] as? [[String: Any]])?.first)
        let entry = try #require(release["entry"] as? [String: Any], "entry is \(String(describing: release["entry"]))")
        #expect(entry["version"] as? String == "1" && entry["notes"] as? String == "first")
        #expect((entry["archive"] as? [String: Any])?["url"] as? String == "archives/app/1/app-1.tar.zst")
    }
}
