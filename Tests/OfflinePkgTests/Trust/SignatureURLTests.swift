import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Signature URL")
struct SignatureURLTests {
    @Test(arguments: [
        ("https://cdn.example.com/app/manifest.json", "https://cdn.example.com/app/manifest.json.minisig"),
        (
            "https://cdn.example.com/app/manifest.json?token=a%2Fb&x=1",
            "https://cdn.example.com/app/manifest.json.minisig?token=a%2Fb&x=1"
        ),
        ("file:///srv/repo/manifest.json", "file:///srv/repo/manifest.json.minisig"),
    ])
    func theSignatureSitsBesideTheManifestAndKeepsTheQuery(_ manifest: String, _ signature: String) {
        #expect(ManifestFetcher.signatureURL(of: URL(string: manifest)!).absoluteString == signature)
    }
}
