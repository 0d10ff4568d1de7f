import Foundation
import OfflinePkgTestSupport
import Testing

/// Headless Chromium loads a package page whose script fetch()es an API URL that a runtime rule
/// covers: online through `serve` to nginx, then with nginx stopped and `serve --offline`.
@Suite(.serialized, .disabled(if: skipBrowser, "OFFLINEPKG_SKIP_BROWSER=1"))
struct RuntimeCacheBrowserTests {
    @Test func pageShowsAPIDataOnlineAndAfterGoingOffline() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: chromium), "no Chromium at \(chromium): run `make deps`")
        let rig = try RuntimeCacheRig(
            files: ["v1/greeting.json": "{\"text\": \"hello from the api\"}"],
            locations: "location /v1/ { add_header Access-Control-Allow-Origin \"*\"; }")
        let site = rig.scratch.path("app-site")
        try writeSite(
            [
                "index.html": """
                <!doctype html><html><body><p id="data">pending</p>
                <script>
                fetch("http://\(rig.apiHost)/v1/greeting.json")
                  .then(r => r.json())
                  .then(j => { document.getElementById("data").textContent = "api says: " + j.text; })
                  .catch(e => { document.getElementById("data").textContent = "failed: " + e; });
                </script></body></html>
                """
            ], to: site)
        try await rig.publishAndSync(
            rules: "{\"rules\": [{\"prefix\": \"\(rig.apiPrefix)\", \"strategy\": \"stale-while-revalidate\"}]}", site: site)

        func load() throws -> String {
            let port = rig.serve!.port
            let profile = try TemporaryDirectory(prefix: "offlinepkg-chromium")
            return try run(
                chromium,
                [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=\(profile.path)",
                    "--host-resolver-rules=MAP app.runtime.test 127.0.0.1:\(port), MAP api.runtime.test 127.0.0.1:\(port)",
                    "--virtual-time-budget=5000", "--dump-dom", "http://app.runtime.test/",
                ], timeout: 30, killingGroup: true
            ).stdout
        }
        try rig.startServe()
        let online = try load()
        #expect(online.contains("<p id=\"data\">api says: hello from the api</p>"), "\(online.suffix(500))")
        #expect(rig.upstreamRequests("/v1/greeting.json").count == 1)

        rig.stopUpstream()
        try rig.startServe(offline: true)
        let offline = try load()
        #expect(offline.contains("<p id=\"data\">api says: hello from the api</p>"), "\(offline.suffix(500))")
    }
}
