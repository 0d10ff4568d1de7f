import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgCLI

/// `offlinepkg publish` end to end in process: the command table, the exit statuses, and a publish →
/// sync round trip through the CLI alone.
@Suite struct PublishCommandTests {
    private func run(_ arguments: [String]) async -> Int32 {
        await InProcessCLI.run(arguments, environment: [:]).status
    }

    @Test func publishThenSyncThroughTheCommandLine() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-cli-publish")
        let dir = scratch.path
        let page = String(repeating: "<p>offline</p>\n", count: 400)
        try writeSite(["index.html": page, "app.js": "let v = 1\n", "about/index.html": page + "about"], to: dir + "/v1")
        try writeSite(["index.html": page, "app.js": "let v = 2\n", "about/index.html": page + "about"], to: dir + "/v2")
        let common = ["--repo", dir + "/repo", "--id", "web", "--route", "https://m.example.com/", "--quiet"]
        #expect(await run(["publish", dir + "/v1", "--version", "1"] + common) == 0)
        #expect(await run(["sync", dir + "/repo/manifest.json", "--root", dir + "/root", "--quiet"]) == 0)
        #expect(await run(["publish", dir + "/v2", "--version", "2", "--format", "tar.gz"] + common) == 0)
        #expect(FileSystem.exists(dir + "/repo/archives/web/2/web-2.tar.gz"))
        #expect(FileSystem.exists(dir + "/repo/archives/web/2/web-1-to-2.delta.tar.gz"))
        #expect(await run(["sync", dir + "/repo/manifest.json", "--root", dir + "/root", "--quiet"]) == 0)

        let store = try PackageStore(root: URL(fileURLWithPath: dir + "/root"), options: .init(watchInterval: 0))
        let hit = try #require(store.resolve("https://m.example.com/app.js"))
        #expect(try FileSystem.read(hit.path) == Array("let v = 2\n".utf8))
        let manifest = try Manifest(parsing: FileSystem.read(dir + "/repo/manifest.json"), source: "test")
        #expect(manifest.sequence == 2)
        #expect(manifest.packages.first?.deltas.map(\.from) == ["1"])
    }

    @Test(
        arguments: [
            (["--id", "web", "--version", "1", "--route", "https://m.example.com/"], 2),  // no --repo
            (["--repo", "R", "--id", "web", "--version", "1"], 2),  // no --route
            (["--repo", "R", "--id", "web", "--version", "1", "--route", "https://m.example.com/", "--format", "rar"], 2),
            (["--repo", "R", "--id", "Web!", "--version", "1", "--route", "https://m.example.com/"], 2),
            (
                ["--repo", "R", "--id", "web", "--version", "1", "--route", "https://m.example.com/", "--format", "tar.gz",
                 "--compression-level", "12"], 2
            ),
            (
                ["--repo", "R", "--id", "web", "--version", "1", "--route", "https://m.example.com/", "--entry", "missing.html"],
                4
            ),
        ] as [([String], Int32)])
    func badInvocationsExitWithTheirStatus(arguments: [String], status: Int32) async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-cli-publish")
        let dir = scratch.path
        try writeSite(["index.html": "x"], to: dir + "/site")
        let resolved = arguments.map { $0 == "R" ? dir + "/repo" : $0 }
        #expect(await run(["publish", dir + "/site"] + resolved) == status)
        // Refused before the repository is touched: not even its folder or lock file.
        #expect(!FileSystem.exists(dir + "/repo"))
    }

    /// zstd's level 3 by default (fast to write; devices decode every level alike), and the level a
    /// publisher asks for otherwise.
    @Test func compressionLevelDefaultsToThreeForZstdAndCanBeChosen() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-cli-publish")
        let dir = scratch.path
        // Text whose compressed bytes differ from level to level.
        let text = (0..<4000).map { "line \($0) of the page, offline \($0 % 17) \($0 * 7919 % 1000)\n" }.joined()
        try writeSite(["index.html": text], to: dir + "/site")
        var sizes = [String: Int64]()
        for level in ["default", "1", "3", "19"] {
            let repo = dir + "/repo-\(level)"
            let extra = level == "default" ? [] : ["--compression-level", level]
            #expect(
                await run(
                    ["publish", dir + "/site", "--repo", repo, "--id", "web", "--version", "1", "--route", "https://m.example.com/",
                     "--quiet"] + extra) == 0)
            sizes[level] = FileSystem.fileSize(repo + "/archives/web/1/web-1.tar.zst")
        }
        let bytes = { (level: String) in try FileSystem.read(dir + "/repo-\(level)/archives/web/1/web-1.tar.zst") }
        #expect(try bytes("default") == bytes("3"))
        #expect(try bytes("19") != bytes("3") && bytes("1") != bytes("3"))
        #expect(sizes.values.allSatisfy { $0 > 0 })
    }

    @Test func publishIsInTheCommandTable() {
        let spec = OfflinePkgCommand.commands.first { $0.name == "publish" }
        let options = Set(spec?.options.map(\.name) ?? [])
        for flag in [
            "repo", "id", "version", "route", "entry", "fallback", "deltas", "sign-key", "rollout", "min-shell-version", "format",
        ] {
            #expect(options.contains(flag), "publish lacks --\(flag)")
        }
        #expect(OfflinePkgCommand.overview.contains("publish"))
    }

    /// The entry of package `id` in `repo/manifest.json`, read as plain JSON so the test sees the field
    /// names a device reads, not the library's model of them.
    private func manifestEntry(_ repo: String, _ id: String) throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(FileSystem.read(repo + "/manifest.json")))
        let packages = try #require((object as? [String: Any])?["packages"] as? [[String: Any]])
        return try #require(packages.first { $0["id"] as? String == id })
    }

    @Test(arguments: [(["--deltas", "1"], ["3"]), ([], ["1", "2", "3"])] as [([String], [String])])
    func deltasComeFromTheLastNVersions(deltaOption: [String], expectedFroms: [String]) async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-cli-publish")
        let dir = scratch.path
        // Text that barely compresses keeps the full archive larger than a delta, so no delta is skipped.
        let unchanged = (0..<500).map { _ in UUID().uuidString }.joined(separator: "\n")
        let common = ["--repo", dir + "/repo", "--id", "web", "--route", "https://m.example.com/", "--quiet"]
        for version in 1...4 {
            try writeSite(["index.html": unchanged, "app.js": "let v = \(version)\n"], to: dir + "/v\(version)")
            #expect(await run(["publish", dir + "/v\(version)", "--version", "\(version)"] + deltaOption + common) == 0)
        }
        let entry = try manifestEntry(dir + "/repo", "web")
        #expect(entry["version"] as? String == "4")
        let deltas = try #require(entry["deltas"] as? [[String: Any]])
        #expect(deltas.compactMap { $0["from"] as? String }.sorted() == expectedFroms)
        for delta in deltas {
            let url = try #require(delta["url"] as? String)
            #expect(FileSystem.exists(dir + "/repo/" + url), "\(url) is listed but not in the repository")
        }
    }

    @Test func entryFallbackRolloutAndMinShellVersionReachTheManifest() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-cli-publish")
        let dir = scratch.path
        try writeSite(["start.html": "start", "spa/shell.html": "shell", "app.js": "let v = 1\n"], to: dir + "/site")
        let status = await run([
            "publish", dir + "/site", "--repo", dir + "/repo", "--id", "web", "--version", "1",
            "--route", "https://m.example.com/", "--entry", "start.html", "--fallback", "spa/shell.html",
            "--rollout", "25", "--min-shell-version", "3.2", "--quiet",
        ])
        #expect(status == 0)
        let entry = try manifestEntry(dir + "/repo", "web")
        #expect(entry["entry"] as? String == "start.html")
        #expect(entry["fallback"] as? String == "spa/shell.html")
        #expect(entry["rollout"] as? Int == 25)
        #expect(entry["minShellVersion"] as? String == "3.2")
    }

    @Test func expiresIsWrittenAndAnExpiredManifestIsRefused() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-cli-publish")
        let dir = scratch.path
        try writeSite(["index.html": "v1"], to: dir + "/v1")
        let common = ["--repo", dir + "/repo", "--id", "web", "--route", "https://m.example.com/", "--quiet"]
        #expect(await run(["publish", dir + "/v1", "--version", "1", "--expires", "30d"] + common) == 0)
        let manifest = try Manifest(parsing: FileSystem.read(dir + "/repo/manifest.json"), source: "repo")
        let expires = try #require(manifest.expires)
        #expect(abs(expires.timeIntervalSinceNow - 30 * 86_400) < 120)
        // A manifest whose expiry has passed is never written: devices would refuse every package in it.
        #expect(await run(["publish", dir + "/v1", "--version", "1", "--expires", "2020-01-01T00:00:00Z"] + common) == 4)
        #expect(try Manifest(parsing: FileSystem.read(dir + "/repo/manifest.json"), source: "repo") == manifest)
        #expect(await run(["publish", dir + "/v1", "--version", "1", "--expires", "soon"] + common) == 2)
    }
}
