import FoundationEssentials

/// A keys document (`keys/<N>.json`, docs/protocol.md#keys-documents): which minisign keys may sign the
/// next keys document (`root`) and the manifest (`manifest`), and how many of each must. Documents are
/// chained: version N+1 is trusted only when a threshold of version N's root keys and a threshold of its
/// own signed its exact bytes (`KeysChain`), so a device that trusts one version follows the publisher's
/// keys from there.
///
/// The bytes are read as the manifest is (`JSONDocument`: one reading of a signed text, duplicate keys
/// refused) and kept as they were: signatures cover them, not a re-encoding.
public struct KeysDocument: Sendable, Equatable {
    /// The keys of one role and how many of them must sign.
    public struct Role: Sendable, Equatable {
        public let keys: [TrustedKey]
        public let threshold: Int

        /// The key ids, in the document's order, as minisign prints them.
        public var keyIDs: [String] { keys.map(\.keyID) }

        package init(keys: [TrustedKey], threshold: Int) {
            self.keys = keys
            self.threshold = threshold
        }

        /// The role as a set: its keys in byte order, then the threshold. Two roles with the same
        /// fingerprint accept exactly the same signatures, whatever the order the document lists them in.
        package var fingerprint: String {
            keys.map(\.minisignPublicKey).sorted().joined(separator: ",") + "/" + String(threshold)
        }

        /// Whether `key` (its id and public key) is one of this role's.
        package func contains(_ key: TrustedKey) -> Bool { keys.contains(key) }
    }

    public let version: Int
    /// Past this time the document is refused, unless a newer version follows it
    /// (docs/protocol.md#keys-documents).
    public let expires: Date?
    public let root: Role
    public let manifest: Role
    /// The document's bytes, exactly as signed.
    public let bytes: [UInt8]

    /// The format this build reads.
    public static let supportedFormat = 1
    /// A keys document is a few lines; anything near this size is not one.
    public static let maximumSize = 64 << 10
    /// Keys one role may list: every one may cost a device a request for its signature file.
    public static let maximumKeysPerRole = 32

    /// Reads the keys document a shell ships (`sync --trust-root FILE`). Throws
    /// `OfflinePkgError.invalidArgument` naming the file and what is wrong.
    public init(contentsOfFile path: String) throws {
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.read(path, limit: Self.maximumSize)
        } catch OfflinePkgError.sizeMismatch {
            throw OfflinePkgError.invalidArgument("invalid keys document \(path): larger than \(Self.maximumSize) bytes")
        }
        do {
            try self.init(bytes: bytes, source: path)
        } catch OfflinePkgError.keysRefused(_, let reason) {
            throw OfflinePkgError.invalidArgument("invalid keys document \(path): \(reason)")
        }
    }

    /// Parses a keys document; `source` names it in errors (`OfflinePkgError.keysRefused`).
    public init(bytes: [UInt8], source: String) throws {
        guard bytes.count <= Self.maximumSize else {
            throw OfflinePkgError.keysRefused(source: source, reason: "larger than \(Self.maximumSize) bytes")
        }
        let document: JSONDocument
        do {
            document = try JSONDocument(parsing: bytes)
        } catch {
            throw OfflinePkgError.keysRefused(
                source: source, reason: "\(error.path.isEmpty ? "(document)" : error.path): \(error.reason)")
        }
        let reader = KeysDocumentReader(source: source)
        guard let object = document.root.object else { throw reader.fail("(document)", "expected a JSON object") }
        let format = try reader.integer(object["format"], "format", required: true)!
        guard format == Self.supportedFormat else {
            throw reader.fail(
                "format",
                format > Self.supportedFormat
                    ? "format \(format) needs a newer offlinepkg (this one reads format 1)" : "must be 1, got \(format)")
        }
        version = try reader.integer(object["version"], "version", required: true)!
        guard version >= 1 else { throw reader.fail("version", "must be at least 1, got \(version)") }
        if let text = try reader.string(object["expires"], "expires", required: false) {
            guard let date = RFC3339.parse(text) else {
                throw reader.fail("expires", "expected an RFC 3339 time such as 2028-01-01T00:00:00Z, got \(reader.quoted(text))")
            }
            expires = date
        } else {
            expires = nil
        }
        root = try reader.role(object["root"], "root")
        manifest = try reader.role(object["manifest"], "manifest")
        self.bytes = bytes
    }

    /// Whether the document has expired at `time`.
    public func hasExpired(at time: Date) -> Bool { expires.map { $0 <= time } ?? false }

    /// The sha256 of the bytes, lowercase hex: what tells two documents of one version apart.
    package var sha256: String { SHA256.hash(bytes).hex }

    /// The keys of `earlier`'s roles that this document no longer lists, by id (revocation is removal).
    package func keysRemoved(since earlier: KeysDocument) -> [TrustedKey] {
        let now = root.keys + manifest.keys
        var seen = Set<String>()
        return (earlier.root.keys + earlier.manifest.keys).filter {
            !now.contains($0) && seen.insert($0.minisignPublicKey).inserted
        }
    }
}

/// Reads the fields of a keys document, each refusal a `.keysRefused` naming the field.
private struct KeysDocumentReader: StrictFieldReader {
    let source: String

    func fail(_ field: String, _ reason: String) -> OfflinePkgError {
        .keysRefused(source: source, reason: "\(field): \(reason)")
    }

    func role(_ value: JSONValue?, _ field: String) throws -> KeysDocument.Role {
        guard let object = value?.object else { throw fail(field, value == nil ? "missing" : "expected an object") }
        guard let list = object["keys"]?.array, !list.isEmpty else {
            throw fail("\(field).keys", "expected a non-empty list of minisign public keys (their base64 lines)")
        }
        guard list.count <= KeysDocument.maximumKeysPerRole else {
            throw fail("\(field).keys", "lists \(list.count) keys; at most \(KeysDocument.maximumKeysPerRole) are read")
        }
        var keys = [TrustedKey]()
        for (index, item) in list.enumerated() {
            let at = "\(field).keys[\(index)]"
            let line = try string(item, at, text: .identifier)!
            let key: TrustedKey
            do {
                key = try TrustedKey(minisignPublicKey: line)
            } catch OfflinePkgError.invalidArgument(let reason) {
                throw fail(at, reason)
            }
            // One form only: the base64 line, as `minisign -P` takes it, so one key has one spelling.
            guard key.minisignPublicKey == line else {
                throw fail(at, "expected the key's base64 line alone, as minisign -P takes it")
            }
            // Signature files are named by key id: two keys of one role under one id could not both sign.
            if let other = keys.first(where: { $0.keyIDBytes == key.keyIDBytes }) {
                throw fail(at, other == key ? "key \(key.keyID) is listed twice" : "two keys share the key id \(key.keyID)")
            }
            // A key id is a label the signature does not cover: one public key under two ids is one signer,
            // and would otherwise count twice towards a threshold.
            if let other = keys.first(where: { $0.publicKeyBytes == key.publicKeyBytes }) {
                throw fail(at, "keys \(other.keyID) and \(key.keyID) are one public key under two key ids: one key is one signer")
            }
            keys.append(key)
        }
        let threshold = try integer(object["threshold"], "\(field).threshold", required: true)!
        guard (1...keys.count).contains(threshold) else {
            throw fail("\(field).threshold", "must be from 1 to the \(keys.count) key(s) listed, got \(threshold)")
        }
        return KeysDocument.Role(keys: keys, threshold: threshold)
    }
}
