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

    /// Behind TLS, ranges and files past the copied cache are sent from a map of the file (plain HTTP
    /// sends them from the open file): exact bytes for ranges at any offset within a page, and whole.
    @Test func rangesAndLargeFilesComeOutExactBehindTLS() async throws {
        let scratch = try TemporaryDirectory()
        defer { withExtendedLifetime(scratch) {} }
        let text = (0..<60_000).map { "line \($0)\n" }.joined()
        try writeSite(["big.txt": text], to: scratch.path("site"))
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1, packages: [.init(id: "a", version: "1", routes: ["https://a.example.com/"], site: scratch.path("site"))])
        // No copied cache: the whole file goes to the large-file cache, ranges to the per-request path.
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, memoryCacheCapacity: 0))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let server = try LoopbackServer(store: store, tls: true)
        try server.start()
        defer { server.stop() }
        let certificate = store.layout.root + "/tls/certificate.pem"
        let bytes = Array(text.utf8)
        func get(_ extra: [String]) throws -> [UInt8] {
            Array(
                try Tool.curl(
                    ["--cacert", certificate, "--connect-to", "a.example.com:443:127.0.0.1:\(server.port)", "-fsS"] + extra
                        + ["https://a.example.com/big.txt"]
                ).stdout.utf8)
        }
        #expect(try get([]) == bytes)
        for (start, end) in [(0, 0), (4_095, 4_096), (4_097, 300_000), (bytes.count - 1, bytes.count - 1)] {
            #expect(try get(["-H", "Range: bytes=\(start)-\(end)"]) == Array(bytes[start...end]), "\(start)-\(end)")
        }
        #expect(server.cachedLargeResponses.entries == 1)
    }
}
