import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkgReports

let chromium = "/usr/bin/chromium"
let skipBrowser = ProcessInfo.processInfo.environment["OFFLINEPKG_SKIP_BROWSER"] == "1"

/// The `reports show --html` page in headless Chromium: its charts are drawn — SVG elements present,
/// sized, with visible marks — and its screenshot is no blank page.
@Suite(.serialized, .disabled(if: skipBrowser, "OFFLINEPKG_SKIP_BROWSER=1"))
struct ReportsPageBrowserTests {
    func browse(_ arguments: [String]) throws -> ProcessResult {
        try #require(
            FileManager.default.isExecutableFile(atPath: chromium),
            "no Chromium at \(chromium): run `make deps` to install it (or set OFFLINEPKG_SKIP_BROWSER=1 to skip these tests)")
        let profile = try TemporaryDirectory(prefix: "offlinepkg-chromium")
        return try run(
            chromium,
            ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=\(profile.path)"] + arguments,
            timeout: 30, killingGroup: true)
    }

    /// Each SVG's rendered size and how many of its marks (lines, bars, dots) have a size of their own,
    /// measured by a script in a copy of the page (the page itself has none).
    static let measure = """
        <pre id="measured"></pre><script>
        window.addEventListener("load", () => {
          const charts = [...document.querySelectorAll("svg")].map(svg => {
            const box = svg.getBoundingClientRect();
            const marks = [...svg.querySelectorAll("polyline, rect.bar, circle")].filter(mark => {
              const size = mark.getBBox();
              return size.width > 0 || size.height > 0;
            }).length;
            return [Math.round(box.width), Math.round(box.height), marks];
          });
          document.getElementById("measured").textContent = JSON.stringify(charts);
        });
        </script></body>
        """

    @Test func thePageDrawsItsCharts() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-page")
        let summary = FleetSummary.make(ImportAndShowTests.rows(ImportAndShowTests.fleet(now: Date())), days: 30, now: Date())
        let page = try scratch.write(summary.page, to: "page.html")
        let measured = try scratch.write(
            summary.page.replacingOccurrences(of: "</body>", with: Self.measure), to: "measured.html")
        let dom = try browse(["--dump-dom", "file://\(measured)"])
        let text = try #require(
            dom.stdout.firstMatch(of: /<pre id="measured">(.*?)<\/pre>/)?.output.1, "\(dom.stderr.suffix(1000))")
        let charts = try #require(try JSONSerialization.jsonObject(with: Data(String(text).utf8)) as? [[Int]])
        // Adoption, devices now, rates, bytes by way: one package, four charts.
        #expect(charts.count == 4, "\(charts)")
        for chart in charts {
            #expect(chart[0] == 720 && chart[1] >= 60, "a chart \(chart[0])x\(chart[1])")
            #expect(chart[2] >= 2, "a chart with \(chart[2]) visible marks")
        }
        let shot = scratch.path("page.png")
        let blank = scratch.path("blank.png")
        _ = try browse(["--screenshot=\(shot)", "--window-size=1000,1400", "file://\(page)"])
        _ = try browse(["--screenshot=\(blank)", "--window-size=1000,1400", "about:blank"])
        let pageImage = try PNGInfo(path: shot)
        let blankImage = try PNGInfo(path: blank)
        #expect(pageImage.width == 1000 && pageImage.height == 1400)
        #expect(
            pageImage.byteCount > blankImage.byteCount * 5, "page \(pageImage.byteCount) bytes, blank \(blankImage.byteCount)")
    }
}
