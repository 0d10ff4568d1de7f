import Foundation

/// A private certificate authority made by `openssl` for one test, as a fleet behind its own CA has: a
/// client that trusts `certificatePath` (`sync --cacert`) accepts the server certificates it issues, and
/// one that trusts only the system's refuses them.
public final class TestCertificateAuthority: Sendable {
    public let folder: TemporaryDirectory
    /// The CA's certificate (PEM): what a client is told to trust.
    public var certificatePath: String { folder.path("ca.crt") }
    private var keyPath: String { folder.path("ca.key") }

    public init() throws {
        folder = try TemporaryDirectory(prefix: "offlinepkg-ca")
        try run(
            "openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=offlinepkg test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", keyPath, "-out", certificatePath,
            ]
        ).checked("openssl req (CA)")
        // Readable by nginx's workers and by an unprivileged sync.
        chmod(folder.path, 0o755)
        chmod(certificatePath, 0o644)
    }

    /// The subjectAltName of a server certificate unless a test names others.
    public static let loopbackNames = "IP:127.0.0.1,DNS:localhost"

    /// Writes a key and a certificate for `names` (a subjectAltName: 127.0.0.1 and `localhost` unless
    /// told) issued by this CA.
    public func issueServerCertificate(key: String, certificate: String, names: String = loopbackNames) throws {
        let request = key + ".csr"
        let extensions = key + ".ext"
        try run(
            "openssl",
            [
                "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1",
                "-keyout", key, "-out", request,
            ]
        ).checked("openssl req (server)")
        try "subjectAltName=\(names)\nextendedKeyUsage=serverAuth\n".write(
            toFile: extensions, atomically: true, encoding: .utf8)
        try run(
            "openssl",
            [
                "x509", "-req", "-in", request, "-CA", certificatePath, "-CAkey", keyPath, "-CAcreateserial", "-days", "2",
                "-extfile", extensions, "-out", certificate,
            ]
        ).checked("openssl x509 (issue)")
    }
}
