internal import CCrypto
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The key and self-signed certificate `serve --tls` presents (docs/protocol.md#the-loopback-server), kept in `<root>/tls/`.
///
/// The key (ECDSA P-256) is made once and never replaced, so the pin a shell passes to Chromium
/// (`spkiSHA256`) stays valid; the certificate names every host of the active set's routes and of
/// the runtime rules plus `localhost`, `127.0.0.1` and `::1`, and is re-issued with the same key when
/// a set or a manifest brings a host it lacks. Here rather than in the server because libcrypto is imported by this module alone
/// (docs/design.md); the server gets PEM text.
package struct LoopbackCertificate: Sendable {
    /// The names every certificate carries, whatever the routes.
    package static let loopbackNames = ["localhost", "127.0.0.1", "::1"]
    /// Validity of an issued certificate; one that ends within `renewalMargin` is issued again.
    static let lifetime: TimeInterval = 397 * 86_400
    static let renewalMargin: TimeInterval = 30 * 86_400

    package let keyPEM: String
    package let certificatePEM: String
    /// `<root>/tls/certificate.pem`: what a WebKitGTK or Android shell trusts.
    package let certificatePath: String
    /// Base64 of the SHA-256 of the key's SubjectPublicKeyInfo: Chromium's
    /// `--ignore-certificate-errors-spki-list` value.
    package let spkiSHA256: String

    /// The hosts a certificate for `set` must name: its routes' hosts, then those of `urls` (the
    /// runtime rules' prefixes, which `serve` answers too), lowercased, IPv6 without brackets, and the
    /// loopback names, without repeats, in a stable order.
    package static func names(for set: ActiveSet, alsoNaming urls: [String] = []) -> [String] {
        var names = loopbackNames
        for route in set.packages.flatMap(\.routes) + urls {
            guard var host = URLComponents(string: route)?.host?.lowercased(), !host.isEmpty else { continue }
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            if !names.contains(host) { names.append(host) }
        }
        return names
    }

    /// The identity for `set`: the root's key (made on first use) and a certificate naming every host
    /// of `set`, the stored one when it already does and is not near its end, else a new one written
    /// atomically beside the key.
    package static func prepare(
        layout: CacheLayout, for set: ActiveSet, alsoNaming urls: [String] = [], now: Date = WallClock.system.now()
    ) throws -> LoopbackCertificate {
        try FileSystem.makeDirectories(layout.tls, mode: 0o700)
        let key = try loadOrMakeKey(layout.tlsKey)
        defer { EVP_PKEY_free(key) }
        let names = names(for: set, alsoNaming: urls)
        if let stored = try? String(contentsOfFile: layout.tlsCertificate, encoding: .utf8),
            let certificate = parseCertificate(stored)
        {
            defer { X509_free(certificate) }
            if X509_check_private_key(certificate, key) == 1, covers(certificate, names),
                X509_cmp_time(X509_get0_notAfter(certificate), nil) > 0,
                expires(certificate, after: now.addingTimeInterval(renewalMargin))
            {
                return try LoopbackCertificate(key: key, certificatePEM: stored, path: layout.tlsCertificate)
            }
        }
        let pem = try issue(key: key, names: names, now: now)
        try FileSystem.writeAtomically(Array(pem.utf8), to: layout.tlsCertificate)
        return try LoopbackCertificate(key: key, certificatePEM: pem, path: layout.tlsCertificate)
    }

    /// What `status --json` reports: the stored certificate and its key's pin, or nil before the first
    /// `serve --tls`. Reads only.
    package static func stored(layout: CacheLayout) -> (certificatePath: String, spkiSHA256: String)? {
        guard let text = try? String(contentsOfFile: layout.tlsCertificate, encoding: .utf8),
            let certificate = parseCertificate(text)
        else { return nil }
        defer { X509_free(certificate) }
        guard let key = X509_get0_pubkey(certificate), let pin = try? spki(key) else { return nil }
        return (layout.tlsCertificate, pin)
    }

    private init(key: OpaquePointer, certificatePEM: String, path: String) throws {
        keyPEM = try Self.privateKeyPEM(key)
        self.certificatePEM = certificatePEM
        certificatePath = path
        spkiSHA256 = try Self.spki(key)
    }

    // MARK: key

    private static func loadOrMakeKey(_ path: String) throws -> OpaquePointer {
        if FileSystem.exists(path) {
            let text = try readOwnKey(path)
            guard let key = withMemoryBIO(text, { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
                throw OfflinePkgError.corruptState(path: path, reason: "not a PEM private key: \(lastError())")
            }
            guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else {
                EVP_PKEY_free(key)
                throw OfflinePkgError.corruptState(path: path, reason: "expected an ECDSA P-256 key")
            }
            return key
        }
        let key = try makeKey()
        do {
            try writeKeyOnce(try privateKeyPEM(key), to: path)
        } catch {
            EVP_PKEY_free(key)
            throw error
        }
        // Another process may have won the race to create it: use whichever key is on disk.
        EVP_PKEY_free(key)
        return try loadOrMakeKey(path)
    }

    /// The key file's text, when it is this user's alone (docs/protocol.md#neighbours-on-the-device): a key another user owns (who could
    /// swap it for one they know) or can read (who could copy it) would let them pose as every route of
    /// the certificate to the shell; such a key is refused, not used. Opened without following a link.
    private static func readOwnKey(_ path: String) throws -> String {
        let fd = try FileDescriptor.open(path, O_RDONLY | O_NOFOLLOW)
        return try fd.closeAfter { fd in
            var info = stat()
            guard fstat(fd.rawValue, &info) == 0 else { throw OfflinePkgError.io(path: path, operation: "fstat", Errno.current) }
            if info.st_uid != geteuid() {
                let owner = getpwuid(info.st_uid).map { " (\(String(cString: $0.pointee.pw_name)))" } ?? ""
                throw OfflinePkgError.corruptState(
                    path: path,
                    reason: "owned by uid \(info.st_uid)\(owner), not by this user (uid \(geteuid())): refused; remove it to make a new key")
            }
            if info.st_mode & 0o077 != 0 {
                throw OfflinePkgError.corruptState(
                    path: path,
                    reason: "mode 0\(String(info.st_mode & 0o777, radix: 8)) lets other users read or change it: refused; remove it to make a new key (0600)")
            }
            var bytes = [UInt8]()
            var chunk = [UInt8](repeating: 0, count: 16 << 10)
            while true {
                let count = try chunk.withUnsafeMutableBytes { try fd.read(into: $0, path: path) }
                if count == 0 { break }
                bytes += chunk[..<count]
                guard bytes.count <= 1 << 20 else { throw OfflinePkgError.corruptState(path: path, reason: "larger than a key") }
            }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    private static func makeKey() throws -> OpaquePointer {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw failure("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
            EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1,
            EVP_PKEY_keygen(context, &key) == 1, let key
        else { throw failure("EVP_PKEY_keygen (P-256)") }
        return key
    }

    /// Writes the key with mode 0600 under a temporary name and links it into place, so a key that is
    /// already there (another process's) is never replaced.
    private static func writeKeyOnce(_ pem: String, to path: String) throws {
        let temporary = path + ".tmp-\(getpid())"
        let fd = try FileSystem.createNew(temporary, mode: 0o600)
        defer { unlink(temporary) }
        try fd.closeAfter { (fd) throws in
            try fd.writeAll(Array(pem.utf8), path: temporary)
            try fd.sync(path: temporary)
        }
        if link(temporary, path) != 0 && errno != EEXIST {
            throw OfflinePkgError.io(path: path, operation: "link", Errno.current)
        }
        try FileSystem.syncDirectory(FileSystem.parentPath(path))
    }

    private static func privateKeyPEM(_ key: OpaquePointer) throws -> String {
        try memoryBIOText { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) == 1 }
    }

    private static func spki(_ key: OpaquePointer) throws -> String {
        var der: UnsafeMutablePointer<UInt8>?
        let length = i2d_PUBKEY(key, &der)
        guard length > 0, let der else { throw failure("i2d_PUBKEY") }
        defer { CRYPTO_free(der, #fileID, #line) }
        let digest = SHA256.hash(UnsafeBufferPointer(start: der, count: Int(length)))
        return Data(digest.bytes).base64EncodedString()
    }

    // MARK: certificate

    private static func issue(key: OpaquePointer, names: [String], now: Date) throws -> String {
        guard let certificate = X509_new() else { throw failure("X509_new") }
        defer { X509_free(certificate) }
        var serial = [UInt8](repeating: 0, count: 16)
        guard RAND_bytes(&serial, Int32(serial.count)) == 1 else { throw failure("RAND_bytes") }
        serial[0] &= 0x7f  // a positive serial number
        let serialNumber = BN_bin2bn(serial, Int32(serial.count), nil)
        defer { BN_free(serialNumber) }
        var start = time_t(now.timeIntervalSince1970 - 86_400)  // a day of slack for clocks behind
        var end = time_t(now.timeIntervalSince1970 + lifetime)
        guard X509_set_version(certificate, 2) == 1,  // v3
            BN_to_ASN1_INTEGER(serialNumber, X509_get_serialNumber(certificate)) != nil,
            X509_time_adj_ex(X509_getm_notBefore(certificate), 0, 0, &start) != nil,
            X509_time_adj_ex(X509_getm_notAfter(certificate), 0, 0, &end) != nil,
            X509_set_pubkey(certificate, key) == 1
        else { throw failure("X509 fields") }
        let subject = X509_get_subject_name(certificate)
        guard X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, "offlinepkg loopback", -1, -1, 0) == 1,
            X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8, "offlinepkg", -1, -1, 0) == 1,
            X509_set_issuer_name(certificate, subject) == 1
        else { throw failure("X509 subject") }
        let alternativeNames = names.map { name in
            (isIPAddress(name) ? "IP:" : "DNS:") + name
        }.joined(separator: ",")
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, certificate, certificate, nil, nil, 0)
        for (nid, value) in [
            (NID_subject_alt_name, alternativeNames), (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_key_usage, "critical,digitalSignature"), (NID_ext_key_usage, "serverAuth"),
            (NID_subject_key_identifier, "hash"),
        ] {
            guard let extensionValue = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                throw failure("certificate extension \(value)")
            }
            defer { X509_EXTENSION_free(extensionValue) }
            guard X509_add_ext(certificate, extensionValue, -1) == 1 else { throw failure("X509_add_ext") }
        }
        guard X509_sign(certificate, key, EVP_sha256()) > 0 else { throw failure("X509_sign") }
        return try memoryBIOText { PEM_write_bio_X509($0, certificate) == 1 }
    }

    private static func parseCertificate(_ pem: String) -> OpaquePointer? {
        withMemoryBIO(pem) { PEM_read_bio_X509($0, nil, nil, nil) }
    }

    private static func covers(_ certificate: OpaquePointer, _ names: [String]) -> Bool {
        names.allSatisfy { name in
            isIPAddress(name)
                ? X509_check_ip_asc(certificate, name, 0) == 1
                : X509_check_host(certificate, name, name.utf8.count, UInt32(X509_CHECK_FLAG_NEVER_CHECK_SUBJECT), nil) == 1
        }
    }

    private static func expires(_ certificate: OpaquePointer, after date: Date) -> Bool {
        var time = time_t(date.timeIntervalSince1970)
        return X509_cmp_time(X509_get0_notAfter(certificate), &time) > 0
    }

    private static func isIPAddress(_ name: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }

    // MARK: OpenSSL plumbing

    private static func withMemoryBIO<T>(_ text: String, _ body: (OpaquePointer) -> T?) -> T? {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { buffer -> T? in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }

    private static func memoryBIOText(_ write: (OpaquePointer) -> Bool) throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw failure("BIO_new") }
        defer { BIO_free(bio) }
        guard write(bio) else { throw failure("PEM write") }
        var data: UnsafeMutablePointer<CChar>?
        let length = ccrypto_bio_mem_data(bio, &data)
        guard length > 0, let data else { throw failure("BIO_get_mem_data") }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }

    private static func lastError() -> String {
        let code = ERR_get_error()
        guard code != 0 else { return "no OpenSSL error" }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func failure(_ step: String) -> OfflinePkgError {
        .unavailable("making the loopback TLS certificate failed at \(step): \(lastError())")
    }
}
