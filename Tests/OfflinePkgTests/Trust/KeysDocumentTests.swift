import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// Keys documents (docs/protocol.md#keys-documents): one strict reading, the chain rule, and distinct
/// signers.
@Suite("Keys documents")
struct KeysDocumentTests {
    static func role(_ keys: [SigningKey], _ threshold: Int = 1) -> KeysDocument.Role {
        KeysDocument.Role(keys: keys.map(\.publicKey), threshold: threshold)
    }

    static func document(_ version: Int, root: KeysDocument.Role, manifest: KeysDocument.Role, expires: Date? = nil) throws
        -> KeysDocument
    {
        try KeysDocument(
            bytes: KeysDocument.encode(
                version: version, expires: expires ?? Date().addingTimeInterval(3600), root: root, manifest: manifest),
            source: "test")
    }

    static func sign(_ document: KeysDocument, _ keys: [SigningKey]) throws -> [[UInt8]] {
        try keys.map { try $0.sign(document.bytes, trustedComment: "test") }
    }

    /// The reason of a `.keysRefused` thrown by `body`, or nil.
    static func refusal(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch OfflinePkgError.keysRefused(_, let reason) {
            return reason
        } catch {
            Issue.record("expected a keys refusal, got \(error)")
            return nil
        }
    }

    @Test func theEncodedDocumentReadsBackAsWritten() throws {
        let (root, ci) = (SigningKey.generate(), SigningKey.generate())
        let expires = Date(timeIntervalSince1970: 1_900_000_000)
        let document = try Self.document(3, root: Self.role([root]), manifest: Self.role([ci]), expires: expires)
        #expect(document.version == 3 && document.expires == expires)
        #expect(document.root.keys == [root.publicKey] && document.manifest.keys == [ci.publicKey])
        let text = String(decoding: document.bytes, as: UTF8.self)
        #expect(text.hasPrefix("{\n  \"format\": 1,\n  \"version\": 3,\n  \"expires\": \"2030-03-17T17:46:40Z\","))
    }

    @Test(arguments: [
        (
            #"{"format":1,"version":1,"version":2,"root":{"keys":["K"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "duplicate key \"version\""
        ),
        (
            #"{"format":2,"version":1,"root":{"keys":["K"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "needs a newer offlinepkg"
        ),
        (
            #"{"format":1,"version":0,"root":{"keys":["K"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "version: must be at least 1"
        ),
        (
            #"{"format":1,"version":1.0,"root":{"keys":["K"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "not an integer"
        ),
        (
            #"{"format":1,"version":1,"root":{"keys":["K"],"threshold":2},"manifest":{"keys":["K"],"threshold":1}}"#,
            "root.threshold: must be from 1 to the 1 key(s)"
        ),
        (
            #"{"format":1,"version":1,"root":{"keys":["K"],"threshold":0},"manifest":{"keys":["K"],"threshold":1}}"#,
            "root.threshold"
        ),
        (
            #"{"format":1,"version":1,"root":{"keys":[],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "root.keys: expected a non-empty list"
        ),
        (
            #"{"format":1,"version":1,"root":{"keys":["K","K"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "is listed twice"
        ),
        (#"{"format":1,"version":1,"root":{"keys":["K"],"threshold":1}}"#, "manifest: missing"),
        (
            #"{"format":1,"version":1,"expires":"soon","root":{"keys":["K"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "expires: expected an RFC 3339 time"
        ),
        (
            #"{"format":1,"version":1,"root":{"keys":["untrusted comment: x\nK"],"threshold":1},"manifest":{"keys":["K"],"threshold":1}}"#,
            "control character"
        ),
    ])
    func aDocumentIsReadOneWayOnly(_ text: String, _ expected: String) throws {
        let key = SigningKey.generate().publicKey.minisignPublicKey
        let bytes = Array(text.replacingOccurrences(of: "\"K\"", with: "\"\(key)\"").utf8)
        let reason = Self.refusal { _ = try KeysDocument(bytes: bytes, source: "test") }
        #expect(reason?.contains(expected) == true, "\(reason ?? "accepted")")
    }

    @Test func twoKeysOfARoleMayNotShareAKeyID() throws {
        let first = SigningKey.generate()
        let twin = SigningKey(keyIDBytes: first.keyIDBytes, seed: SigningKey.generate().seed)
        let bytes = KeysDocument.encode(
            version: 1, expires: nil, root: Self.role([first, twin]), manifest: Self.role([first]))
        #expect(
            Self.refusal { _ = try KeysDocument(bytes: bytes, source: "test") }?.contains("share the key id \(first.keyID)")
                == true)
    }

    /// A minisign key id is not covered by the signature: one public key under a second id must not count
    /// as a second signer, whether a document lists it twice or a tally meets it twice.
    @Test func onePublicKeyUnderTwoKeyIDsIsOneSigner() throws {
        let key = SigningKey.generate()
        var otherID = key.keyIDBytes
        otherID[0] ^= 0xff
        let relabelled = SigningKey(keyIDBytes: otherID, seed: key.seed)
        let listedTwice = KeysDocument.encode(
            version: 1, expires: nil, root: Self.role([key]), manifest: Self.role([key, relabelled], 2))
        #expect(
            Self.refusal { _ = try KeysDocument(bytes: listedTwice, source: "test") }?.contains(
                "one public key under two key ids") == true)
        let role = Self.role([key, relabelled], 2)
        let message = Array("manifest".utf8)
        let signatures = try [key, relabelled].map { try $0.sign(message, trustedComment: "test") }
        let tally = SignerTally(message: message, signatures: signatures, keys: role.keys, source: "t")
        #expect(tally.valid.count == 1)
        #expect(!tally.meets(2))
    }

    @Test func theChainNeedsAThresholdOfTheOldRootAndOfTheNew() throws {
        let (r1, r2, r3, ci) = (SigningKey.generate(), SigningKey.generate(), SigningKey.generate(), SigningKey.generate())
        let one = try Self.document(1, root: Self.role([r1, r2], 2), manifest: Self.role([ci]))
        let two = try Self.document(2, root: Self.role([r2, r3], 2), manifest: Self.role([ci]))
        #expect(KeysChain.problem(from: one, to: two, signatures: try Self.sign(two, [r1, r2, r3]), source: "t") == nil)
        // Short of the old threshold; short of the new one (r3 missing); the wrong version.
        #expect(
            KeysChain.problem(from: one, to: two, signatures: try Self.sign(two, [r2, r3]), source: "t")?.contains(
                "version 1's root keys") == true)
        #expect(
            KeysChain.problem(from: one, to: two, signatures: try Self.sign(two, [r1, r2]), source: "t")?.contains(
                "its own root keys") == true)
        let three = try Self.document(3, root: Self.role([r2, r3], 2), manifest: Self.role([ci]))
        #expect(
            KeysChain.problem(from: one, to: three, signatures: try Self.sign(three, [r1, r2, r3]), source: "t")?.contains(
                "it says version 3") == true)
        // An expired version still leads to the next one: expiry is the last version's business.
        let expired = try Self.document(
            1, root: Self.role([r1]), manifest: Self.role([ci]), expires: Date(timeIntervalSince1970: 1))
        let renewed = try Self.document(2, root: Self.role([r1]), manifest: Self.role([ci]))
        #expect(KeysChain.problem(from: expired, to: renewed, signatures: try Self.sign(renewed, [r1]), source: "t") == nil)
    }

    @Test func oneKeyCountsOnceHoweverManyFilesItSigned() throws {
        let (r1, r2) = (SigningKey.generate(), SigningKey.generate())
        let one = try Self.document(1, root: Self.role([r1, r2], 2), manifest: Self.role([r1]))
        let two = try Self.document(2, root: Self.role([r1, r2], 2), manifest: Self.role([r1]))
        let twice = try Self.sign(two, [r1, r1, r1])
        let tally = SignerTally(message: two.bytes, signatures: twice, keys: one.root.keys, source: "t")
        #expect(tally.valid == [r1.publicKey])
        #expect(
            KeysChain.problem(from: one, to: two, signatures: twice, source: "t")?.contains(
                "valid: \(r1.keyID); missing: \(r2.keyID)") == true)
    }

    @Test func aSignatureOfOtherBytesDoesNotCount() throws {
        let root = SigningKey.generate()
        let one = try Self.document(1, root: Self.role([root]), manifest: Self.role([root]))
        let two = try Self.document(2, root: Self.role([root]), manifest: Self.role([root]))
        let tally = SignerTally(message: two.bytes, signatures: try Self.sign(one, [root]), keys: [root.publicKey], source: "t")
        #expect(tally.valid.isEmpty && tally.others == [root.keyID])
    }

    @Test func aHostFollowsItsTrustRootThroughTheUpdater() async throws {
        let dir = try TemporaryDirectory(prefix: "offlinepkg-keys")
        let (root, ci, ci2) = (SigningKey.generate(), SigningKey.generate(), SigningKey.generate())
        let publisher = Publisher(repository: URL(fileURLWithPath: dir.path("repo")))
        try writeSite([SiteFile("index.html", "one")], to: dir.path("site"))
        _ = try publisher.initKeys(
            signers: [root], rootThreshold: 1, manifestKeys: [ci.publicKey], manifestThreshold: 1, expires: nil)
        let request = PublishRequest(site: dir.path("site"), id: "home", version: "1", routes: ["https://m.example.com/"])
        _ = try publisher.publish(request, signingKeys: [ci])
        let shipped = try KeysDocument(contentsOfFile: dir.path("repo/keys/1.json"))
        var change = KeysChange()
        (change.addManifest, change.removeManifest) = ([ci2.publicKey], [ci.publicKey])
        _ = try publisher.rotateKeys(signers: [root], change: change)
        var second = request
        second.version = "2"
        _ = try publisher.publish(second, signingKeys: [ci2])

        let store = try PackageStore(root: dir.url.appendingPathComponent("device"))
        let events = EventLog()
        let options = Updater.Options(events: { events.append($0) }, trustRoot: shipped)
        let report = try await Updater(
            store: store, manifestURL: URL(fileURLWithPath: dir.path("repo/manifest.json")), options: options
        )
        .sync()
        #expect(report.outcome == .activated)
        let updates = events.all.compactMap { event -> String? in
            guard case .keysUpdated(let from, let to, let removed) = event else { return nil }
            return "\(from ?? 0)->\(to) removed \(removed)"
        }
        #expect(updates == ["1->2 removed [\"\(ci.keyID)\"]"])
        let trust = try #require(try store.status().trust.first)
        #expect(trust.keysVersion == 2 && trust.manifestKeys == [ci2.keyID] && trust.removedKeys == [ci.keyID: 2])
    }
}
