import Foundation
import OfflinePkgTestSupport
import Testing

/// A real browser on an https route through `offlinepkg serve --tls`, the way a Chromium-family shell
/// connects (README, "Connecting a webview"): host names mapped to loopback, the root's key pinned.
@Suite(.serialized, .disabled(if: skipBrowser, "OFFLINEPKG_SKIP_BROWSER=1"))
struct SecureOriginBrowserTests {
    static let font = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

    /// The page's script: everything a secure context gives, reported as one JSON string.
    static func page(release: Int, cdnImage: Bool) -> String {
        """
        <!doctype html><html><head><title>release \(release)</title></head><body>
        <img id="logo" src="img/logo.svg">\(cdnImage ? "<img id=\"cdn\" src=\"https://cdn.example.com/lib/logo.svg\">" : "")
        <script>
        async function loaded(image) {
          if (!image) return null;
          if (!image.complete) await new Promise((done) => { image.onload = done; image.onerror = done; });
          return image.naturalWidth;
        }
        window.report = (async () => {
          const report = { secure: self.isSecureContext, subtle: typeof crypto.subtle };
          try {
            report.digest = (await crypto.subtle.digest("SHA-256", new TextEncoder().encode("x"))).byteLength;
            const registration = await navigator.serviceWorker.register("sw.js");
            await navigator.serviceWorker.ready;
            report.worker = registration.active ? registration.active.scriptURL : null;
            report.image = await loaded(document.getElementById("logo"));
            report.cdnImage = await loaded(document.getElementById("cdn"));
            const font = new FontFace("Packaged", "url(fonts/packaged.ttf)");
            await font.load();
            report.font = font.status;
            report.fetch = (await (await fetch("data.json")).json()).release;
          } catch (error) { report.error = String(error); }
          return JSON.stringify(report);
        })();
        </script></body></html>
        """
    }

    static func publish(_ repository: RepositoryBuilder, _ scratch: TemporaryDirectory, release: Int) throws {
        let site = scratch.path("site-\(release)")
        let demoLogo = demoManifest.deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("demo-site/home/img/logo.svg").path
        try writeSite(
            [
                "index.html": page(release: release, cdnImage: release > 1), "data.json": "{\"release\": \(release)}",
                "sw.js": """
                self.addEventListener("install", () => self.skipWaiting());
                self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
                """,
            ], to: site)
        try writeFile(try Data(contentsOf: URL(fileURLWithPath: demoLogo)), to: site + "/img/logo.svg")
        try writeFile(try Data(contentsOf: URL(fileURLWithPath: font)), to: site + "/fonts/packaged.ttf")
        var packages: [RepositoryBuilder.Package] = [
            .init(id: "app", version: "\(release)", routes: ["https://m.example.com/app/"], site: site)
        ]
        if release > 1 {
            // A second host: the certificate must be re-issued for it while serve runs.
            let cdn = scratch.path("cdn-\(release)")
            try writeFile(try Data(contentsOf: URL(fileURLWithPath: demoLogo)), to: cdn + "/logo.svg")
            packages.append(.init(id: "cdn", version: "\(release)", routes: ["https://cdn.example.com/lib/"], site: cdn))
        }
        try repository.publish(sequence: release, packages: packages)
    }

    static func tlsStatus(_ root: String) async throws -> (certificate: String, pin: String) {
        let status = await InProcessCLI.run(["status", "--root", root, "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let tls = try #require(object?["tls"] as? [String: String], "status --json: \(status.stdout)")
        return (try #require(tls["certificate"]), try #require(tls["spkiSHA256"]))
    }

    static func report(_ browser: DevToolsBrowser) throws -> [String: Any] {
        let text = try #require(try browser.evaluate("window.report", timeout: 20) as? String)
        return try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func httpsRouteIsASecureContextAndReloadsIntoTheNextRelease() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: chromium), "no Chromium at \(chromium): run `make deps`")
        try #require(FileManager.default.fileExists(atPath: Self.font), "no \(Self.font): run `make deps` (fonts-dejavu-core)")
        let scratch = try TemporaryDirectory()
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        let root = scratch.path("root")
        try Self.publish(repository, scratch, release: 1)
        let sync = ["sync", repository.manifestURL.absoluteString, "--root", root, "--quiet"]
        try #require(try await InProcessCLI.run(sync).status == 0)
        let serve = try ServeProcess(root: root, ["--tls"])
        #expect(serve.url.scheme == "https")
        let (certificate, pin) = try await Self.tlsStatus(root)
        #expect(FileManager.default.fileExists(atPath: certificate))

        let browser = try DevToolsBrowser(
            chromium,
            arguments: [
                "--host-resolver-rules=MAP m.example.com 127.0.0.1:\(serve.port), MAP cdn.example.com 127.0.0.1:\(serve.port)",
                "--ignore-certificate-errors-spki-list=\(pin)",
            ], url: "https://m.example.com/app/")
        _ = try browser.wait(for: "document.title") { $0 as? String == "release 1" }
        let first = try Self.report(browser)
        #expect(first["secure"] as? Bool == true, "\(first)")
        #expect(first["subtle"] as? String == "object", "\(first)")
        #expect(first["digest"] as? Int == 32, "\(first)")
        #expect(first["worker"] as? String == "https://m.example.com/app/sw.js", "\(first)")
        #expect(first["image"] as? Int == 64, "\(first)")
        #expect(first["font"] as? String == "loaded", "\(first)")
        #expect(first["fetch"] as? Int == 1, "\(first)")

        // Another process syncs release 2, which brings a second host; serve re-issues its certificate
        // with the same key, and a reload shows the new release with the new host's image.
        try Self.publish(repository, scratch, release: 2)
        try #require(try await InProcessCLI.run(sync).status == 0)
        var title: Any?
        for _ in 0..<20 {
            try await Task.sleep(nanoseconds: 500_000_000)
            try browser.reload()
            title = try browser.wait(for: "document.title", timeout: 5) { $0 as? String == "release 2" }
            if title as? String == "release 2" { break }
        }
        #expect(title as? String == "release 2")
        let second = try Self.report(browser)
        #expect(second["fetch"] as? Int == 2, "\(second)")
        #expect(second["cdnImage"] as? Int == 64, "\(second)")
        #expect(second["secure"] as? Bool == true, "\(second)")
        await #expect(try Self.tlsStatus(root).pin == pin, "the key, and so the pin, stays across a re-issue")
        // The running server presents the re-issued certificate: curl, trusting only it, checks the
        // new host's name against it.
        let fetched = try Tool.curl([
            "--cacert", certificate, "--connect-to", "cdn.example.com:443:127.0.0.1:\(serve.port)", "-o", "/dev/null",
            "-w", "%{http_code}", "https://cdn.example.com/lib/logo.svg",
        ])
        #expect(fetched.stdout == "200", "\(fetched.stdout) \(fetched.stderr)")
        let names = try run("/usr/bin/openssl", ["x509", "-in", certificate, "-noout", "-ext", "subjectAltName"]).stdout
        #expect(names.contains("DNS:cdn.example.com") && names.contains("DNS:m.example.com"), "\(names)")
        #expect(names.contains("DNS:localhost") && names.contains("IP Address:127.0.0.1"), "\(names)")
    }
}
