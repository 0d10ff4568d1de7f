import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

/// A real browser (headless Chromium) loads pages from `serve`, with no repository server running:
/// host-resolver rules send the app's host name to the loopback port. A missing Chromium fails these
/// tests (`make deps` installs it) rather than skipping them unseen; `OFFLINEPKG_SKIP_BROWSER=1` skips them.
@Suite(.serialized, .disabled(if: skipBrowser, "OFFLINEPKG_SKIP_BROWSER=1"))
struct BrowserTests {
    func browse(_ port: UInt16, _ arguments: [String]) throws -> ProcessResult {
        try #require(
            FileManager.default.isExecutableFile(atPath: chromium),
            "no Chromium at \(chromium): run `make deps` to install it (or set OFFLINEPKG_SKIP_BROWSER=1 to skip these tests)"
        )
        let profile = try TemporaryDirectory(prefix: "offlinepkg-chromium")
        return try run(
            chromium,
            [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=\(profile.path)",
                "--host-resolver-rules=MAP demo.offlinepkg.test 127.0.0.1:\(port), MAP check.offlinepkg.test 127.0.0.1:\(port)",
            ] + arguments, timeout: 30, killingGroup: true)
    }

    @Test func demoPageRunsItsScript() async throws {
        let demo = try await ServedDemo()
        let result = try browse(demo.port, ["--dump-dom", "http://demo.offlinepkg.test/"])
        #expect(result.stdout.contains("<p id=\"status\">served offline by offlinepkg</p>"), "\(result.stderr.suffix(2000))")
        #expect(result.stdout.contains("Hello from the cache"))
    }

    /// The page's own script reports what the browser made of the CSS and the image it fetched.
    @Test func stylesheetAndImageApply() async throws {
        let scratch = try TemporaryDirectory()
        let site = scratch.path("site")
        let demoSite = demoManifest.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
            "demo-site/home"
        ).path
        try FileManager.default.copyItem(atPath: demoSite, toPath: site)
        try writeSite(
            [
                "check.html": """
                <!doctype html><html><head><link rel="stylesheet" href="/css/site.css"></head>
                <body><img id="logo" src="/img/logo.svg"><p id="report">pending</p>
                <script>
                window.addEventListener("load", () => {
                  const logo = document.getElementById("logo");
                  document.getElementById("report").textContent =
                    "background=" + getComputedStyle(document.body).backgroundColor + " logo=" + logo.naturalWidth;
                });
                </script></body></html>
                """
            ], to: site)
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1, packages: [.init(id: "check", version: "1", routes: ["https://check.offlinepkg.test/"], site: site)])
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let server = try LoopbackServer(store: store)
        try server.start()
        defer { server.stop() }
        let result = try browse(server.port, ["--dump-dom", "http://check.offlinepkg.test/check.html"])
        // site.css sets background #0b6e4f; logo.svg is 64 wide.
        #expect(result.stdout.contains("background=rgb(11, 110, 79) logo=64"), "\(result.stdout.suffix(500))")
    }

    @Test func screenshotShowsTheRenderedPage() async throws {
        let demo = try await ServedDemo()
        let shots = try TemporaryDirectory()
        _ = try browse(
            demo.port, ["--screenshot=\(shots.path("page.png"))", "--window-size=800,600", "http://demo.offlinepkg.test/"])
        _ = try browse(demo.port, ["--screenshot=\(shots.path("blank.png"))", "--window-size=800,600", "about:blank"])
        let page = try PNGInfo(path: shots.path("page.png"))
        let blank = try PNGInfo(path: shots.path("blank.png"))
        #expect(page.width == 800 && page.height == 600)
        // A blank white page compresses to almost nothing; the green page with text and a logo does not.
        #expect(page.byteCount > blank.byteCount * 3, "page \(page.byteCount) bytes, blank \(blank.byteCount) bytes")
    }
}

let chromium = "/usr/bin/chromium"
let skipBrowser = ProcessInfo.processInfo.environment["OFFLINEPKG_SKIP_BROWSER"] == "1"
