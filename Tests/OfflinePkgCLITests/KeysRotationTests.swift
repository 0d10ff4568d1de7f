import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// TUF's attacks on keys (docs/protocol.md#keys-documents), against real repositories that nginx serves,
/// through the binary: a leaked manifest key and the recovery from it, rotations of the root, broken
/// chains, expiry, keys rollback, a kill during a keys update.
@Suite("Keys over time")
struct KeysRotationTests {
    /// A publisher with an offline root key (stock minisign) and a CI key (`keygen`), one honest release
    /// published, uploaded and synced by a device that trusts `keys/1.json`.
    static func fleet() async throws -> KeysFleet {
        let fleet = try KeysFleet()
        try fleet.stockKey("root")
        try await fleet.keygen("ci")
        try await fleet.keysInit(roots: ["root"], manifests: ["ci"])
        try await fleet.publish("1", signers: ["ci"]).checked("publish 1")
        try fleet.upload()
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("first sync")
        #expect(try await fleet.served() == "home 1")
        return fleet
    }

    @Test func aLeakedManifestKeysFastForwardIsRecoveredByRotation() async throws {
        let fleet = try await Self.fleet()
        // The attacker signs sequence 2^63-1 with the leaked CI key: it is valid, the device takes it.
        try await fleet.attack("evil", leaked: "ci", sequence: Int.max, keys: 1)
        try await fleet.sync().checked("the attacker's release, signed by a key the root still trusts")
        #expect(try await fleet.served() == "home evil")

        // The publisher rotates the CI key out with the offline root and publishes the next release.
        try fleet.stockKey("ci2")
        try await fleet.rotate(signers: ["root"], ["--remove-manifest-key", "@ci", "--add-manifest-key", "@ci2"]).checked(
            "rotate")
        try await fleet.publish("2", signers: ["ci2"]).checked("publish 2")
        try fleet.upload()
        // The fleet, given no keys (the root remembers), follows keys version 2 and takes release 2,
        // although its sequence is far below 2^63-1.
        try await fleet.sync().checked("the next honest release")
        #expect(try await fleet.served() == "home 2")
        let trust = try #require(try await fleet.trust())
        #expect(trust["keysVersion"] as? Int == 2)
        #expect(trust["manifestKeys"] as? [String] == [try fleet.id("ci2")])
        #expect((trust["removedKeys"] as? [String: Int])?[try fleet.id("ci")] == 2)
        let reset = try #require(trust["baselineReset"] as? [String: Any])
        #expect(reset["sequence"] as? Int == Int.max && reset["keysVersion"] as? Int == 2)

        // The revoked key's manifests are refused from now on, under the old keys version or the new one.
        let record = try await fleet.deviceRecord()
        try await fleet.attack("evil2", leaked: "ci", sequence: Int.max, keys: 1)
        let rollback = try await fleet.sync()
        #expect(rollback.status == 4)
        #expect(
            rollback.stderr.contains("keys rollback: the manifest names keys version 1, below version 2"), "\(rollback.stderr)")
        try await fleet.attack("evil3", leaked: "ci", sequence: Int.max, keys: 2)
        let revoked = try await fleet.sync()
        #expect(revoked.status == 4)
        #expect(
            revoked.stderr.contains("not counted: \(try fleet.id("ci")) (removed in keys version 2: revoked)"),
            "\(revoked.stderr)")
        #expect(revoked.stderr.contains("missing: \(try fleet.id("ci2"))"))
        #expect(try await fleet.served() == "home 2")
        #expect(try await fleet.deviceRecord() == record)
    }

    @Test func aDeviceFiveVersionsBehindFollowsARootRotatedThreeTimes() async throws {
        let fleet = try await Self.fleet()
        // The root key replaced three times (each version signed by the old root and the new), then the
        // CI key, then a renewal: keys version 6, five versions past the device's.
        for (old, new) in [("root", "root2"), ("root2", "root3"), ("root3", "root4")] {
            try fleet.stockKey(new)
            try await fleet.rotate(signers: [old, new], ["--remove-root-key", "@" + old, "--add-root-key", "@" + new]).checked(
                "rotate \(new)")
        }
        try await fleet.keygen("ci2")
        try await fleet.rotate(signers: ["root4"], ["--remove-manifest-key", "@ci", "--add-manifest-key", "@ci2"]).checked(
            "rotate ci2")
        try await fleet.rotate(signers: ["root4"], ["--expires", "730"]).checked("renew")
        try await fleet.publish("6", signers: ["ci2"]).checked("publish 6")
        try fleet.upload()

        try await fleet.sync().checked("catching up")
        #expect(try await fleet.served() == "home 6")
        // Every version read, in order, none skipped, each once.
        let documents = fleet.nginx.waitForRequests(1).map(\.uri).filter { $0.hasPrefix("/keys/") && $0.hasSuffix(".json") }
        #expect(documents == (2...6).map { "/keys/\($0).json" })
        let trust = try #require(try await fleet.trust())
        #expect(trust["kind"] as? String == "keys-document")
        #expect(trust["keysVersion"] as? Int == 6)
        #expect(trust["rootKeys"] as? [String] == [try fleet.id("root4")] && trust["rootThreshold"] as? Int == 1)
        #expect(trust["manifestKeys"] as? [String] == [try fleet.id("ci2")] && trust["manifestThreshold"] as? Int == 1)
        #expect(trust["expires"] as? String != nil)
        let removed = try #require(trust["removedKeys"] as? [String: Int])
        #expect(removed == [try fleet.id("root"): 2, try fleet.id("root2"): 3, try fleet.id("root3"): 4, try fleet.id("ci"): 5])
        let text = try await fleet.offlinepkg(["status", "--root", fleet.root]).checked("status").stdout
        #expect(text.contains("trust: \(fleet.manifestURL): keys version 6, expires "), "\(text)")

        // A fresh device that ships version 1 catches up the same way; every signature checks with minisign.
        let fresh = try await fleet.offlinepkg([
            "sync", fleet.manifestURL, "--root", fleet.scratch.path("fresh"), "--trust-root", fleet.repo + "/keys/1.json",
            "--quiet",
        ])
        try fresh.checked("a fresh device")
        #expect(try fleet.verifyEverySignatureWithStockMinisign(in: fleet.cdn) == 10)
    }

    /// How a chain is broken, on a device that trusts keys version 1 (2 for `removedRootKey`).
    enum BrokenChain: String, CaseIterable, Sendable {
        case skippedVersion, wrongVersionInside, forgedByTheOldRootOnly, signedByARemovedRootKey, thresholdShortByOne
    }

    @Test(arguments: BrokenChain.allCases)
    func aBrokenChainIsRefusedAndNothingChanges(_ broken: BrokenChain) async throws {
        let fleet = try KeysFleet()
        try fleet.stockKey("root")
        try await fleet.keygen("root2")
        try await fleet.keygen("root3")
        try await fleet.keygen("ci")
        try fleet.stockKey("evil")
        if broken == .thresholdShortByOne {
            try await fleet.keysInit(roots: ["root", "root2", "root3"], manifests: ["ci"], ["--root-threshold", "2"])
        } else {
            try await fleet.keysInit(roots: ["root"], manifests: ["ci"])
        }
        if broken == .signedByARemovedRootKey {
            try await fleet.rotate(signers: ["root", "root2"], ["--remove-root-key", "@root", "--add-root-key", "@root2"])
                .checked(
                    "rotate")
        }
        try await fleet.publish("1", signers: ["ci"]).checked("publish 1")
        try fleet.upload()
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("first sync")
        let before = try await fleet.deviceRecord()
        let trusted = broken == .signedByARemovedRootKey ? 2 : 1

        // A release that names the next keys version, whose document is broken.
        let next = trusted + 1
        try await fleet.attack("evil", leaked: "ci", sequence: 10, keys: broken == .skippedVersion ? next + 1 : next)
        let expected: String
        switch broken {
        case .skippedVersion:
            try fleet.forgeKeys(version: next + 1, roots: ["root"], manifests: ["ci"], signers: ["root"])
            expected = "keys/\(next).json: not found: the manifest names keys version \(next + 1)"
        case .wrongVersionInside:
            try fleet.forgeKeys(version: next + 1, roots: ["root"], manifests: ["ci"], signers: ["root"])
            try FileManager.default.moveItem(
                atPath: fleet.cdn + "/keys/\(next + 1).json", toPath: fleet.cdn + "/keys/\(next).json")
            expected = "keys/\(next).json: it says version \(next + 1)"
        case .forgedByTheOldRootOnly:
            try fleet.forgeKeys(version: next, roots: ["evil"], manifests: ["ci"], signers: ["root"])
            expected =
                "version 2 breaks the chain: it needs 1 signature of its own root keys (\(try fleet.id("evil"))); valid: none"
        case .signedByARemovedRootKey:
            try fleet.forgeKeys(version: next, roots: ["root", "evil"], manifests: ["ci"], signers: ["root", "evil"])
            expected =
                "needs 1 signature of version 2's root keys (\(try fleet.id("root2"))); valid: none; missing: \(try fleet.id("root2")); not counted: \(try fleet.id("root")) (removed in keys version 2: revoked)"
        case .thresholdShortByOne:
            try fleet.forgeKeys(
                version: next, roots: ["root", "root2", "root3"], rootThreshold: 2, manifests: ["evil"], signers: ["root"])
            expected =
                "needs 2 signatures of version 1's root keys (\(try fleet.id("root")), \(try fleet.id("root2")), \(try fleet.id("root3"))); valid: \(try fleet.id("root")); missing 1 of: \(try fleet.id("root2")), \(try fleet.id("root3"))"
        }
        let refused = try await fleet.sync()
        #expect(refused.status == 4, "\(broken): \(refused.stderr)")
        #expect(refused.stderr.contains(expected), "\(broken): \(refused.stderr)")
        #expect(refused.stderr.contains("this root keeps trusting keys version \(trusted)"), "\(refused.stderr)")
        #expect(try await fleet.deviceRecord() == before, "\(broken) changed the device")
        #expect(try await fleet.served() == "home 1")
    }

    /// docs/publishing.md's lost root key: the remaining root key meets version 1's threshold, it and a new
    /// one version 2's; the device follows, and the lost key, found by someone, signs nothing it takes.
    @Test func aLostRootKeyIsReplacedByTheOneLeftAndTheFleetFollows() async throws {
        let fleet = try KeysFleet()
        for name in ["root-a", "root-b", "ci"] { try await fleet.keygen(name) }
        try await fleet.keysInit(roots: ["root-a", "root-b"], manifests: ["ci"])
        try await fleet.publish("1", signers: ["ci"]).checked("publish 1")
        try fleet.upload()
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("first sync")

        try fleet.stockKey("root-c")
        try await fleet.rotate(signers: ["root-b", "root-c"], ["--remove-root-key", "@root-a", "--add-root-key", "@root-c"])
            .checked("rotate without root-a")
        try await fleet.publish("2", signers: ["ci"]).checked("publish 2")
        try fleet.upload()
        try await fleet.sync().checked("sync under the replaced root key")
        #expect(try await fleet.served() == "home 2")
        let trust = try #require(try await fleet.trust())
        #expect(trust["keysVersion"] as? Int == 2)
        #expect(Set(trust["rootKeys"] as? [String] ?? []) == [try fleet.id("root-b"), try fleet.id("root-c")])
        #expect((trust["removedKeys"] as? [String: Int])?[try fleet.id("root-a")] == 2)

        let record = try await fleet.deviceRecord()
        try await fleet.attack("evil", leaked: "ci", sequence: 10, keys: 3)
        try fleet.forgeKeys(version: 3, roots: ["root-a"], manifests: ["ci"], signers: ["root-a"])
        let refused = try await fleet.sync()
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(
            refused.stderr.contains("not counted: \(try fleet.id("root-a")) (removed in keys version 2: revoked)"),
            "\(refused.stderr)")
        #expect(try await fleet.deviceRecord() == record)
        #expect(try await fleet.served() == "home 2")
    }

    /// TUF's endless-data attack on the chain: a manifest naming a keys version far past the trusted one
    /// is refused before a single keys document is asked for.
    @Test func aKeysVersionTooFarAheadIsRefusedBeforeAnyRequest() async throws {
        let fleet = try await Self.fleet()
        let record = try await fleet.deviceRecord()
        let keysRequests = { fleet.nginx.accessLog().filter { $0.uri.hasPrefix("/keys/") }.count }
        let before = keysRequests()
        try await fleet.attack("far", leaked: "ci", sequence: 10, keys: 258)
        let refused = try await fleet.sync()
        #expect(refused.status == 4)
        #expect(
            refused.stderr.contains(
                "the manifest names keys version 258, 257 versions past version 1 that this root trusts; at most 256"),
            "\(refused.stderr)")
        #expect(keysRequests() == before)
        #expect(try await fleet.deviceRecord() == record)
        #expect(try await fleet.served() == "home 1")
    }

    @Test func anExpiredKeysDocumentIsRefusedAndANewerOneAccepted() async throws {
        let fleet = try KeysFleet()
        try await fleet.keygen("root")
        try await fleet.keygen("ci")
        try await fleet.keysInit(roots: ["root"], manifests: ["ci"], ["--expires", "30"])
        try await fleet.publish("1", signers: ["ci"]).checked("publish 1")
        try fleet.upload()
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("sync before the expiry")
        // A month later, for the device and the publisher alike: the clock moves, nothing waits.
        fleet.clock = .fixed(Date().addingTimeInterval(31 * 86_400))
        let record = try await fleet.deviceRecord()

        let expired = try await fleet.sync()
        #expect(expired.status == 4)
        #expect(
            expired.stderr.contains("keys version 1, the newest this root trusts for \(fleet.manifestURL), expired at"),
            "\(expired.stderr)")
        #expect(expired.stderr.contains("offlinepkg keys rotate"))
        let publish = try await fleet.publish("2", signers: ["ci"])
        #expect(publish.status == 4 && publish.stderr.contains("keys version 1 expired at"), "\(publish.stderr)")
        #expect(try await fleet.deviceRecord() == record)

        // Renewed: version 2 follows the expired version 1, which may lead to it.
        try await fleet.rotate(signers: ["root"]).checked("renew")
        try await fleet.publish("2", signers: ["ci"]).checked("publish 2")
        try fleet.upload()
        try await fleet.sync().checked("sync after the renewal")
        // The renewal runs a year from the clock that made it.
        let expires = try #require(try await fleet.trust()?["expires"] as? String)
        #expect(expires.hasPrefix(String(ISO8601DateFormatter().string(from: Date().addingTimeInterval(396 * 86_400)).prefix(7))))
        #expect(try await fleet.served() == "home 2")
        #expect(try await fleet.trust()?["keysVersion"] as? Int == 2)
    }

    @Test func aManifestNamingALowerKeysVersionIsRefused() async throws {
        let fleet = try await Self.fleet()
        try await fleet.rotate(signers: ["root"], ["--expires", "400"]).checked("renew")
        try await fleet.publish("2", signers: ["ci"]).checked("publish 2")
        try fleet.upload()
        try await fleet.sync().checked("sync under version 2")
        let record = try await fleet.deviceRecord()
        // Signed by a key both versions list, with a higher sequence: only the keys version is wrong.
        try await fleet.attack("old", leaked: "ci", sequence: 50, keys: 1)
        let fetched = fleet.nginx.waitForRequests(1).filter { $0.uri == "/manifest.json" }.count
        let refused = try await fleet.sync()
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("keys rollback: the manifest names keys version 1, below version 2"), "\(refused.stderr)")
        // A stale edge gets the benefit of the doubt first: the manifest was fetched twice, the second
        // time past any cache.
        var manifests = 0
        for _ in 0..<40 {
            manifests = fleet.nginx.accessLog().filter { $0.uri == "/manifest.json" }.count
            if manifests >= fetched + 2 { break }
            usleep(50_000)
        }
        #expect(manifests == fetched + 2)
        #expect(try await fleet.deviceRecord() == record)
        #expect(try await fleet.served() == "home 2")
    }

    @Test(arguments: ["keys-verified", "keys-saved"])
    func killedDuringAKeysUpdateLeavesTheOldTrustOrTheNew(_ failpoint: String) async throws {
        let fleet = try await Self.fleet()
        let old = try #require(try await fleet.trust())
        try await fleet.keygen("ci2")
        try await fleet.rotate(signers: ["root"], ["--remove-manifest-key", "@ci", "--add-manifest-key", "@ci2"]).checked(
            "rotate")
        try await fleet.publish("2", signers: ["ci2"]).checked("publish 2")
        try fleet.upload()
        let active = FileManager.default.contents(atPath: fleet.root + "/active.json")

        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = failpoint
        let killed = try fleet.syncInProcessOfItsOwn(environment: environment)
        #expect(killed.status == 128 + SIGKILL, "\(killed.stderr)")
        let trust = try #require(try await fleet.trust())
        if failpoint == "keys-verified" {
            #expect(NSDictionary(dictionary: trust) == NSDictionary(dictionary: old))
        } else {
            // The new version and the baseline it resets, together.
            let newKey = try fleet.id("ci2")
            #expect(trust["keysVersion"] as? Int == 2 && trust["manifestKeys"] as? [String] == [newKey])
            #expect((trust["baselineReset"] as? [String: Any])?["sequence"] as? Int == 1)
        }
        #expect(FileManager.default.contents(atPath: fleet.root + "/active.json") == active)
        #expect(try await fleet.served() == "home 1")

        try await fleet.sync().checked("the next sync")
        #expect(try await fleet.served() == "home 2")
        #expect(try await fleet.trust()?["keysVersion"] as? Int == 2)
    }
}
