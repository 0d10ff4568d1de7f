import Foundation
import OfflinePkgTestSupport
import Testing

/// The manifest and route rules through the real binary: a hostile manifest is a
/// refusal (exit 4) and never looks like a network failure; a route no browser sends is a usage error at
/// `publish` (exit 2) that says what to write.
@Suite("Manifest rules through the binary")
struct ManifestRulesCommandTests {
    /// A served repository with one installed release, and the root that holds it.
    struct Installed {
        let repo: TestRepository
        let nginx: NginxServer
        let root: TemporaryDirectory
        var manifestURL: String { nginx.url("manifest.json").absoluteString }

        init() async throws {
            repo = try TestRepository()
            try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "one")])
            try repo.publish()
            nginx = try NginxServer(documentRoot: repo.path)
            root = try TemporaryDirectory()
            let first = await InProcessCLI.run(["sync", manifestURL, "--root", root.path, "--quiet"])
            #expect(first.status == 0, "\(first.stderr)")
        }

        /// Syncs, expects exit 4 with `message` on stderr, and the first release still answering.
        func expectRefused(_ message: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let sync = await InProcessCLI.run(["sync", manifestURL, "--root", root.path, "--quiet"])
            #expect(sync.status == 4, "\(sync.stderr)", sourceLocation: sourceLocation)
            #expect(sync.stderr.contains(message), "\(sync.stderr)", sourceLocation: sourceLocation)
            let lookup = await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", root.path])
            #expect(lookup.status == 0 && lookup.stdout.contains("/home/"), "\(lookup.stderr)", sourceLocation: sourceLocation)
        }
    }

    @Test func aNULInTheArchiveURLIsARefusedManifest() async throws {
        let installed = try await Installed()
        try installed.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "two")])
        installed.repo.edit("home") { entry in
            var archive = entry["archive"] as! [String: Any]
            archive["url"] = (archive["url"] as! String) + "\u{0}junk"
            entry["archive"] = archive
        }
        let written = try installed.repo.publish()
        #expect(String(decoding: written, as: UTF8.self).contains(#"\u0000junk"#))
        try await installed.expectRefused("archive.url: \"archives/home-2.tar.gz\\u{0}junk\" contains the control character U+0000")
    }

    @Test func aDuplicateKeyIsARefusedManifest() async throws {
        let installed = try await Installed()
        try installed.repo.add("home", "2", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "two")])
        let text = String(decoding: try installed.repo.publish(), as: UTF8.self)
        // A second "tree" that a last-wins reader would take: the manifest must not read two ways.
        let doubled = text.replacingOccurrences(of: #""id""#, with: #""tree":"\#(String(repeating: "0", count: 64))","id""#)
        #expect(doubled != text)
        try doubled.write(toFile: installed.repo.manifestPath, atomically: true, encoding: .utf8)
        try await installed.expectRefused("invalid manifest \(installed.manifestURL): packages[0]: duplicate key \"tree\"")
    }

    @Test func aRouteNoBrowserSendsIsRefusedAtSync() async throws {
        let installed = try await Installed()
        try installed.repo.add("home", "2", routes: ["https://M.Example.com:443/"], files: [SiteFile("index.html", "two")])
        try installed.repo.publish()
        try await installed.expectRefused("write \"https://m.example.com/\"")
    }

    @Test(arguments: [
        ("https://Bücher.example/", "write \"https://xn--bcher-kva.example/\""),
        ("http://0x7f.1/", "write \"http://127.0.0.1/\""),
        ("http://[0:0::1]/", "write \"http://[::1]/\""),
        ("https://m.example.com\\home\\", "write \"https://m.example.com/home/\""),
        ("https://m.example.com:65536/", "has the port 65536, outside 1–65535"),
    ])
    func publishRefusesARouteNoBrowserSends(_ route: String, _ message: String) async throws {
        let dir = try TemporaryDirectory()
        _ = try dir.write("<p>x</p>", to: "site/index.html")
        let publish = await InProcessCLI.run([
            "publish", dir.path("site"), "--repo", dir.path("repo"), "--id", "home", "--version", "1", "--route", route, "--quiet",
        ])
        #expect(publish.status == 2, "\(publish.stderr)")
        #expect(publish.stderr.contains("route \"\(route.replacingOccurrences(of: "\\", with: "\\\\"))\""), "\(publish.stderr)")
        #expect(publish.stderr.contains(message), "\(publish.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path("repo/manifest.json")))
    }
}
