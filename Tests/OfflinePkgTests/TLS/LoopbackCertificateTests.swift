import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// `serve --tls`'s identity (docs/protocol.md#the-loopback-server): a P-256 key made once (0600), a certificate naming the set's
/// hosts and the loopback names, re-issued with the same key only when a host is missing; the pin is
/// what openssl computes from the certificate.
@Suite struct LoopbackCertificateTests {
    static func set(_ routes: [String]) -> ActiveSet {
        let entry = PackageEntry(
            id: "home", version: "1", routes: routes, archive: RemoteFile(url: "a.tar.gz", sha256: "", size: 0), tree: "")
        return ActiveSet(generation: 1, sequence: 1, activatedAt: Date(), packages: [InstalledPackage(entry)])
    }

    static func openssl(_ arguments: [String], input: String? = nil) throws -> String {
        try run("/bin/sh", ["-c", "openssl " + arguments.joined(separator: " ")]).checked("openssl").stdout
    }

    @Test func keyIsMadeOnceAndTheCertificateNamesEveryHost() throws {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path("root"))
        try layout.prepare()
        let first = try LoopbackCertificate.prepare(
            layout: layout, for: Self.set(["https://M.Example.com/home/", "http://[::2]:8080/x/"]))
        var info = stat()
        #expect(stat(layout.tlsKey, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let text = try Self.openssl(["x509", "-in", layout.tlsCertificate, "-noout", "-text"])
        for name in [
            "DNS:m.example.com", "DNS:localhost", "IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1",
            "IP Address:0:0:0:0:0:0:0:2",
        ] {
            #expect(text.contains(name), "\(name) in \(text)")
        }
        #expect(text.contains("ASN1 OID: prime256v1") && text.contains("ecdsa-with-SHA256"))
        #expect(text.contains("TLS Web Server Authentication"))
        let pin = try Self.openssl([
            "x509", "-in", layout.tlsCertificate, "-pubkey", "-noout", "|", "openssl", "pkey", "-pubin", "-outform", "der",
            "|", "openssl", "dgst", "-sha256", "-binary", "|", "base64",
        ]).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(first.spkiSHA256 == pin)
        #expect(LoopbackCertificate.stored(layout: layout)?.spkiSHA256 == pin)

        // The same hosts: the stored certificate stands. A new host: a new certificate, the same key.
        let again = try LoopbackCertificate.prepare(layout: layout, for: Self.set(["https://m.example.com/other/"]))
        #expect(again.certificatePEM == first.certificatePEM)
        let wider = try LoopbackCertificate.prepare(
            layout: layout, for: Self.set(["https://m.example.com/home/", "https://cdn.example.com/lib/"]))
        #expect(wider.certificatePEM != first.certificatePEM)
        #expect(wider.spkiSHA256 == first.spkiSHA256 && wider.keyPEM == first.keyPEM)
        #expect(
            try Self.openssl(["x509", "-in", layout.tlsCertificate, "-noout", "-ext", "subjectAltName"]).contains(
                "DNS:cdn.example.com"))
        // A certificate about to expire is issued again.
        let later = try LoopbackCertificate.prepare(
            layout: layout, for: Self.set(["https://cdn.example.com/lib/"]), now: Date().addingTimeInterval(380 * 86_400))
        #expect(later.certificatePEM != wider.certificatePEM && later.spkiSHA256 == first.spkiSHA256)
    }

    @Test func aDamagedKeyIsReportedNotReplaced() throws {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path("root"))
        try FileSystem.makeDirectories(layout.tls)
        try Data("not a key".utf8).write(to: URL(fileURLWithPath: layout.tlsKey))
        #expect(throws: OfflinePkgError.self) {
            try LoopbackCertificate.prepare(layout: layout, for: Self.set(["https://a.example/"]))
        }
        #expect(try String(contentsOfFile: layout.tlsKey, encoding: .utf8) == "not a key")
    }
}
