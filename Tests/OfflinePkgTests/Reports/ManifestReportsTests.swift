import Foundation
import Testing

@testable import OfflinePkg

/// The manifest's `reports` object (docs/protocol.md#install-reports): a URL a device will POST to, checked as strictly as the
/// rest of a signed manifest.
@Suite("Manifest reports URL")
struct ManifestReportsTests {
    static func manifest(_ reports: String) -> [UInt8] {
        Array(
            """
            {"format": 1, "sequence": 1, "reports": \(reports), "packages": [{"id": "home", "version": "1",
             "routes": ["https://m.example.com/"], "archive": {"url": "a.tar.gz", "sha256": "\(String(repeating: "0", count: 64))",
             "size": 1}, "tree": "\(String(repeating: "0", count: 64))"}]}
            """.utf8)
    }

    @Test func aReportsURLIsRead() throws {
        let manifest = try Manifest(parsing: Self.manifest("{\"url\": \"https://reports.example.com/v1?key=abc\"}"), source: "m")
        #expect(manifest.reportsURL == "https://reports.example.com/v1?key=abc")
        #expect(try Manifest(parsing: Self.manifest("null"), source: "m").reportsURL == nil)
    }

    @Test(arguments: [
        ("\"https://r.example.com/\"", "reports: expected an object with a url, got"),
        ("{}", "reports.url: missing"),
        ("{\"url\": \"ftp://r.example.com/\"}", "is not an absolute http or https URL"),
        ("{\"url\": \"/reports\"}", "is not an absolute http or https URL"),
        ("{\"url\": \"https://user:pw@r.example.com/\"}", "must not carry a user or password"),
        ("{\"url\": \"https://r.example.com/#x\"}", "must not have a fragment"),
        ("{\"url\": \"https://r.example.com/a b\"}", "holds a space or a control character"),
    ])
    func aBadReportsObjectRefusesTheManifest(_ reports: String, _ problem: String) {
        #expect {
            try Manifest(parsing: Self.manifest(reports), source: "m")
        } throws: { error in
            "\(error)".contains(problem) && "\(error)".hasPrefix("invalid manifest m: reports")
        }
    }
}
