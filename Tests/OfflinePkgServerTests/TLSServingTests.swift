import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

/// `LoopbackServer(tls: true)` without a browser: curl trusting only the root's certificate checks the
/// names it presents, before and after a switch that brings a new host (re-issued without a restart).
@Suite struct TLSServingTests {
    static func curl(_ certificate: String, host: String, port: UInt16, path: String) throws -> ProcessResult {
        try Tool.curl([
            "--cacert", certificate, "--connect-to", "\(host):443:127.0.0.1:\(port)", "-o", "-", "-w", " %{http_code}",
            "https://\(host)\(path)",
        ])
    }

    @Test func aSwitchToANewHostReissuesTheCertificateWhileServing() async throws {
        let scratch = try TemporaryDirectory()
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try writeSite(["index.html": "one"], to: scratch.path("one"))
        try writeSite(["index.html": "two"], to: scratch.path("two"))
        try repository.publish(
            sequence: 1, packages: [.init(id: "a", version: "1", routes: ["https://a.example.com/"], site: scratch.path("one"))])
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")))
        let updater = Updater(store: store, manifestURL: repository.manifestURL)
        _ = try await updater.sync()
        let server = try LoopbackServer(store: store, tls: true)
        try server.start()
        defer { server.stop() }
        #expect(server.url.scheme == "https")
        let certificate = store.layout.root + "/tls/certificate.pem"
        let pin = try #require(server.certificate?.spkiSHA256)
        #expect(try Self.curl(certificate, host: "a.example.com", port: server.port, path: "/").stdout == "one 200")
        // b.example.com is not in the certificate yet: curl refuses the name.
        let before = try Self.curl(certificate, host: "b.example.com", port: server.port, path: "/")
        #expect(before.status != 0, "\(before.stdout)")

        try repository.publish(
            sequence: 2,
            packages: [
                .init(id: "a", version: "1", routes: ["https://a.example.com/"], site: scratch.path("one")),
                .init(id: "b", version: "1", routes: ["https://b.example.com/"], site: scratch.path("two")),
            ])
        _ = try await updater.sync()
        var after = ProcessResult(status: -1, stdout: "", stderr: "")
        for _ in 0..<50 where after.stdout != "two 200" {
            try await Task.sleep(nanoseconds: 100_000_000)
            after = try Self.curl(certificate, host: "b.example.com", port: server.port, path: "/")
        }
        #expect(after.stdout == "two 200", "\(after.stderr)")
        #expect(try Self.curl(certificate, host: "a.example.com", port: server.port, path: "/").stdout == "one 200")
        #expect(server.certificate?.spkiSHA256 == pin)
        // The old certificate's daemons are stopped once the connections they held are gone (curl's
        // closed with each call), not left running, and not stopped under a connection.
        for _ in 0..<50 where server.retiredDaemons > 0 { try await Task.sleep(nanoseconds: 100_000_000) }
        #expect(server.retiredDaemons == 0)
    }
}
