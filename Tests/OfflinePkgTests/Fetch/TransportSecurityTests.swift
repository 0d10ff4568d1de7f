import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// https: a private CA via `caBundle`, and no redirect from https down to http.
@Suite("Transport security")
struct TransportSecurityTests {
    @Test func httpsWithAPrivateCASyncsAndHttpsToHttpsRedirectsAreFollowed() async throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "tls")])
        try repo.publish()
        let tls = try NginxServer(
            documentRoot: repo.path, locations: "location = /moved.json { return 302 /manifest.json; }", tls: true)
        let root = try TemporaryDirectory()
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        let report = try await Updater(
            store: store, manifestURL: tls.url("moved.json"), options: .init(caBundle: tls.certificatePath)
        ).sync()
        #expect(report.outcome == .activated)
        // Without the CA, the certificate is refused.
        let untrusted = try PackageStore(root: try TemporaryDirectory().url, options: .init(watchInterval: 0))
        await #expect(throws: OfflinePkgError.self) {
            try await Updater(store: untrusted, manifestURL: tls.url("manifest.json"), options: .init(retry: .init(attempts: 1)))
                .sync()
        }
    }

    /// https never redirects to http: not from the first URL, and not from an https hop that an http
    /// URL redirected to (http → https → http). The plain server is never asked.
    @Test(arguments: ["https → http", "http → https → http"])
    func httpsNeverRedirectsToHttp(chain: String) async throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "plain")])
        try repo.publish()
        let plain = try NginxServer(documentRoot: repo.path)
        let tls = try NginxServer(
            documentRoot: repo.path,
            locations: "location = /manifest.json { return 302 \(plain.url("manifest.json").absoluteString); }", tls: true)
        let entry = try NginxServer(
            documentRoot: repo.path,
            locations: "location = /manifest.json { return 302 \(tls.url("manifest.json").absoluteString); }")
        let start = chain == "https → http" ? tls.url("manifest.json") : entry.url("manifest.json")
        let store = try PackageStore(root: try TemporaryDirectory().url, options: .init(watchInterval: 0))
        await #expect {
            try await Updater(store: store, manifestURL: start, options: .init(caBundle: tls.certificatePath)).sync()
        } throws: { error in "\(error)".contains("redirect to a disallowed scheme") }
        #expect(tls.requestCount(path: "/manifest.json") == 1)
        #expect(plain.requestCount(path: "/manifest.json") == 0)
    }
}
