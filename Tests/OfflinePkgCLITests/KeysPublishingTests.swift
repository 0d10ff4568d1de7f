import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// The publisher's side of docs/protocol.md#keys-documents (thresholds of signers, `keys rotate`'s
/// refusals, `promote` carrying keys documents, `keys show`) and a root that remembers what it trusts,
/// through the binary.
@Suite("Keys: publishing and remembered trust")
struct KeysPublishingTests {
    /// Every file of `folder` with its bytes, scratch and lock files aside: what "nothing written" compares.
    static func snapshot(_ folder: String) throws -> [String: Data] {
        var files = [String: Data]()
        let walker = FileManager.default.enumerator(atPath: folder)
        while let name = walker?.nextObject() as? String {
            guard !name.hasPrefix(".tmp") && name != ".publish.lock" else { continue }
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: folder + "/" + name, isDirectory: &isFolder), !isFolder.boolValue {
                files[name] = FileManager.default.contents(atPath: folder + "/" + name)
            }
        }
        return files
    }

    @Test func aThresholdOfManifestKeysIsMetOrNothingIsWritten() async throws {
        let fleet = try KeysFleet()
        try await fleet.keygen("root")
        for name in ["ci1", "ci2"] { try await fleet.keygen(name) }
        try fleet.stockKey("ci3")
        try await fleet.keysInit(roots: ["root"], manifests: ["ci1", "ci2", "ci3"], ["--manifest-threshold", "2"])
        let before = try Self.snapshot(fleet.repo)

        let short = try await fleet.publish("1", signers: ["ci1"])
        #expect(short.status == 4)
        let ids = try ["ci1", "ci2", "ci3"].map { try fleet.id($0) }
        #expect(
            short.stderr.contains(
                "keys version 1 needs 2 signatures of its manifest keys (\(ids.joined(separator: ", "))); given: \(ids[0]); missing 1 of: \(ids[1]), \(ids[2])"
            ),
            "\(short.stderr)")
        #expect(try Self.snapshot(fleet.repo) == before, "a publish short of its threshold wrote something")
        let stranger = try await fleet.publish("1", signers: ["ci1", "root"])
        let rootID = try fleet.id("root")
        #expect(stranger.status == 4 && stranger.stderr.contains("--sign-key \(rootID) is not a manifest key"))
        let unsigned = try await fleet.publish("1", signers: [])
        #expect(unsigned.status == 4 && unsigned.stderr.contains("refuse an unsigned manifest"), "\(unsigned.stderr)")
        #expect(try Self.snapshot(fleet.repo) == before)

        try await fleet.publish("1", signers: ["ci1", "ci3"]).checked("publish with two of three")
        try fleet.upload()
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("sync")
        #expect(try await fleet.served() == "home 1")
        #expect(try fleet.verifyEverySignatureWithStockMinisign(in: fleet.cdn) == 3)

        // One of the two signatures gone from the CDN: the device counts one valid key, not two.
        try await fleet.publish("2", signers: ["ci1", "ci2"]).checked("publish 2")
        try fleet.upload()
        let signatures = fleet.cdn + "/signatures"
        for name in try FileManager.default.contentsOfDirectory(atPath: signatures) where name.contains(".\(ids[1]).") {
            try FileManager.default.removeItem(atPath: signatures + "/" + name)
        }
        let refused = try await fleet.sync()
        #expect(refused.status == 4)
        #expect(
            refused.stderr.contains(
                "keys version 1 needs 2 signatures of its manifest keys (\(ids.joined(separator: ", "))); valid: \(ids[0]); missing 1 of: \(ids[1]), \(ids[2])"
            ),
            "\(refused.stderr)")
        #expect(try await fleet.served() == "home 1")
    }

    @Test func keysRotateWritesNothingShortOfEitherThreshold() async throws {
        let fleet = try KeysFleet()
        for name in ["root1", "root2", "root3", "ci"] { try await fleet.keygen(name) }
        try fleet.stockKey("root4")
        try await fleet.keysInit(roots: ["root1", "root2", "root3"], manifests: ["ci"], ["--root-threshold", "2"])
        let before = try Self.snapshot(fleet.repo)
        let ids = try ["root1", "root2", "root3", "root4"].map { try fleet.id($0) }

        let short = try await fleet.rotate(signers: ["root1"], ["--add-root-key", "@root4"])
        #expect(short.status == 4)
        #expect(
            short.stderr.contains(
                "version 2 breaks the chain: it needs 2 signatures of version 1's root keys (\(ids[0]), \(ids[1]), \(ids[2])); valid: \(ids[0]); missing 1 of: \(ids[1]), \(ids[2])"
            ),
            "\(short.stderr)")
        #expect(short.stderr.contains("nothing was written"))
        // The old threshold met, the new one (3 of the 4 new root keys) not.
        let newShort = try await fleet.rotate(
            signers: ["root1", "root2"], ["--add-root-key", "@root4", "--root-threshold", "3"])
        #expect(newShort.status == 4)
        #expect(newShort.stderr.contains("it needs 3 signatures of its own root keys"), "\(newShort.stderr)")
        let stranger = try await fleet.rotate(signers: ["root1", "ci"])
        let ciID = try fleet.id("ci")
        #expect(stranger.status == 2 && stranger.stderr.contains("--sign-key \(ciID) is not a root key"))
        #expect(try Self.snapshot(fleet.repo) == before)

        try await fleet.rotate(signers: ["root1", "root2", "root4"], ["--add-root-key", "@root4", "--root-threshold", "3"])
            .checked(
                "rotate")
        let show = try await fleet.offlinepkg(["keys", "show", "--repo", fleet.repo, "--json"]).checked("keys show")
        let versions = try #require(try jsonObject(show.stdout)["versions"] as? [[String: Any]])
        #expect(versions.count == 2)
        #expect(versions[1]["rootKeys"] as? [String] == ids && versions[1]["rootThreshold"] as? Int == 3)
        #expect(Set(versions[1]["signedBy"] as? [String] ?? []) == [ids[0], ids[1], ids[3]])
        let text = try await fleet.offlinepkg(["keys", "show", "--repo", fleet.repo]).checked("keys show").stdout
        #expect(text.contains("chain: verified from version 1 to 2"))
    }

    /// `--expires` takes a date as well as a number of days; anything else is a usage error that writes
    /// nothing.
    /// One public key copied under another key id is one signer: `keys init` refuses to list it twice.
    @Test func keysInitRefusesOnePublicKeyUnderTwoKeyIDs() async throws {
        let fleet = try KeysFleet()
        for name in ["root", "ci"] { try await fleet.keygen(name) }
        let key = try TrustedKey(contentsOfFile: fleet.key("ci") + ".pub")
        var otherID = key.keyIDBytes
        otherID[0] ^= 0xff
        let copy = TrustedKey(keyIDBytes: otherID, publicKeyBytes: key.publicKeyBytes)
        try Data(copy.fileContents).write(to: URL(fileURLWithPath: fleet.key("ci-copy") + ".pub"))
        let refused = await fleet.offlinepkg([
            "keys", "init", "--repo", fleet.repo, "--sign-key", fleet.key("root") + ".key",
            "--manifest-key", fleet.key("ci") + ".pub", "--manifest-key", fleet.key("ci-copy") + ".pub",
            "--manifest-threshold", "2",
        ])
        #expect(refused.status != 0 && refused.stderr.contains("one public key under two key ids"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fleet.repo + "/keys/1.json"))
    }

    @Test func keysExpiresTakesADateOrDays() async throws {
        let fleet = try KeysFleet()
        for name in ["root", "ci"] { try await fleet.keygen(name) }
        let bad = await fleet.offlinepkg([
            "keys", "init", "--repo", fleet.repo, "--sign-key", fleet.key("root") + ".key", "--manifest-key",
            fleet.key("ci") + ".pub", "--expires", "soon",
        ])
        #expect(bad.status == 2 && bad.stderr.contains("--expires takes a number of days"), "\(bad.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fleet.repo + "/keys/1.json"))
        try await fleet.keysInit(roots: ["root"], manifests: ["ci"], ["--expires", "2030-01-01"])
        let document = try String(contentsOfFile: fleet.repo + "/keys/1.json", encoding: .utf8)
        #expect(document.contains("\"expires\": \"2030-01-01T00:00:00Z\""), "\(document)")
    }

    @Test func promoteCarriesTheKeysDocumentsTheTargetLacks() async throws {
        let fleet = try KeysFleet()
        try await fleet.keygen("root")
        try await fleet.keygen("ci")
        try await fleet.keygen("ci2")
        try await fleet.keysInit(roots: ["root"], manifests: ["ci"])
        try await fleet.rotate(signers: ["root"], ["--add-manifest-key", "@ci2"]).checked("rotate")
        try await fleet.publish("1", signers: ["ci2"]).checked("publish to staging")
        let production = fleet.scratch.path("production")
        let promoted = try await fleet.offlinepkg([
            "promote", "--from", fleet.repo, "--to", production, "--id", "home", "--version", "1", "--sign-key",
            fleet.key("ci") + ".key",
        ]).checked("promote")
        #expect(promoted.stdout.contains("carried keys/1.json, keys/2.json"), "\(promoted.stdout)")
        #expect(try Self.snapshot(production + "/keys") == Self.snapshot(fleet.repo + "/keys"))
        let manifest = try jsonObject(
            String(decoding: FileManager.default.contents(atPath: production + "/manifest.json")!, as: UTF8.self))
        #expect(manifest["keys"] as? Int == 2)
        let device = try await fleet.offlinepkg([
            "sync", production + "/manifest.json", "--root", fleet.root, "--trust-root", fleet.repo + "/keys/1.json", "--quiet",
        ])
        try device.checked("sync of production")
    }

    @Test func aRootRemembersTheKeysItTrustedAndRefusesAnUnsignedManifest() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let nginx = try NginxServer(documentRoot: device.repo)
        let url = nginx.url("manifest.json").absoluteString
        try await device.sync(url).checked("sync with --trust-key")
        let active = device.activeRecord()

        // Published unsigned (a compromised CI without the key, say, which `publish` refuses without
        // --unsign), synced by a cron line without keys.
        let site = device.scratch.path("sites/unsigned")
        try writeSite([SiteFile("index.html", "home unsigned")], to: site)
        try await InProcessCLI.run([
            "publish", site, "--repo", device.repo, "--id", "home", "--version", "unsigned", "--route", "https://m.example.com/",
            "--unsign", "--quiet",
        ]).checked("unsigned publish")
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(5)], ofItemAtPath: device.repo + "/manifest.json")
        let plain = try await InProcessCLI.run(["sync", url, "--root", device.root, "--quiet"])
        #expect(plain.status == 4)
        #expect(
            plain.stderr.contains("this root trusts key \(try TrustedKey(contentsOfFile: device.key + ".pub").keyID) for it"),
            "\(plain.stderr)")
        #expect(plain.stderr.contains("offlinepkg trust --reset \(url)"))
        #expect(device.activeRecord() == active)
        #expect(try await device.served() == "home 1")
        let status = try await device.status()
        #expect((status["trust"] as? [[String: Any]])?.first?["kind"] as? String == "keys")

        // Forgotten on purpose, and only then taken unsigned.
        let reset = try await InProcessCLI.run(["trust", "--reset", url, "--root", device.root]).checked("trust --reset")
        #expect(reset.stdout.contains("forgot key"))
        try await InProcessCLI.run(["sync", url, "--root", device.root, "--quiet"]).checked("sync after trust --reset")
        #expect(try await device.served() == "home unsigned")
    }

    @Test func aRootRemembersItsKeysDocumentAndFollowsItWithoutOptions() async throws {
        let fleet = try await KeysRotationTests.fleet()
        try await fleet.keygen("ci2")
        try await fleet.rotate(signers: ["root"], ["--add-manifest-key", "@ci2"]).checked("rotate")
        try await fleet.publish("2", signers: ["ci2"]).checked("publish 2")
        try fleet.upload()
        // A dry run verifies the new version and keeps nothing of it.
        let record = try await fleet.deviceRecord()
        try await fleet.sync(["--dry-run"]).checked("dry run")
        #expect(try await fleet.deviceRecord() == record)
        try await fleet.sync().checked("sync given no keys")
        #expect(try await fleet.served() == "home 2")
        #expect(try await fleet.trust()?["keysVersion"] as? Int == 2)
        let shown = try jsonObject(
            try await fleet.offlinepkg(["keys", "show", "--root", fleet.root, "--json"]).checked("keys show --root").stdout)
        #expect((shown["trust"] as? [[String: Any]])?.first?["keysVersion"] as? Int == 2)
        // The shipped version 1 given again does not take the root back.
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("sync with the old trust root")
        #expect(try await fleet.trust()?["keysVersion"] as? Int == 2)
        // Unsigned: refused under the remembered document.
        try await fleet.publish("3", signers: ["ci2"]).checked("publish 3")
        try fleet.upload()
        try shell("rm -rf \"$CDN/signatures\" \"$CDN/manifest.json.minisig\"", environment: ["CDN": fleet.cdn])
        let refused = try await fleet.sync()
        #expect(
            refused.status == 4 && refused.stderr.contains("keys version 2 needs 1 signature of its manifest keys"),
            "\(refused.stderr)")
    }

    /// An old shell that still ships keys/1.json after a rotation revoked its manifest key: the root keeps
    /// the newer version it verified, so the revoked key's manifest naming version 1 is a keys rollback.
    @Test func anOlderShippedTrustRootDoesNotTakeTheRootBack() async throws {
        let fleet = try await KeysRotationTests.fleet()
        try await fleet.keygen("ci2")
        try await fleet.rotate(signers: ["root"], ["--remove-manifest-key", "@ci", "--add-manifest-key", "@ci2"]).checked(
            "rotate")
        try await fleet.publish("2", signers: ["ci2"]).checked("publish 2")
        try fleet.upload()
        try await fleet.sync().checked("sync under version 2")
        let record = try await fleet.deviceRecord()

        try await fleet.attack("evil", leaked: "ci", sequence: 50, keys: 1)
        let refused = try await fleet.sync(["--trust-root", "@keys/1.json"])
        #expect(refused.status == 4)
        #expect(
            refused.stderr.contains("keys rollback: the manifest names keys version 1, below version 2"), "\(refused.stderr)")
        #expect(try await fleet.deviceRecord() == record)
        #expect(try await fleet.served() == "home 2")
    }

    @Test func movingFromTrustKeyToTrustRootKeepsTheRollbackBaseline() async throws {
        let fleet = try KeysFleet()
        try await fleet.keygen("ci")
        try fleet.stockKey("root")
        let pinned = ["--trust-key", fleet.key("ci") + ".pub"]
        for version in ["1", "2"] {
            try await fleet.publish(version, signers: ["ci"]).checked("publish \(version)")
            try fleet.upload()
            try await fleet.sync(pinned).checked("sync \(version) with --trust-key")
        }
        // The publisher adopts keys documents with the CI key as manifest key: shells that pin the key
        // go on reading manifest.json.minisig, shells that ship keys/1.json follow the chain.
        try await fleet.keysInit(roots: ["root"], manifests: ["ci"])
        try await fleet.publish("3", signers: ["ci"]).checked("publish 3")
        try fleet.upload()
        try await fleet.sync(pinned).checked("an old shell with --trust-key")
        #expect(try await fleet.served() == "home 3")
        try await fleet.sync(["--trust-root", "@keys/1.json"]).checked("the new shell with --trust-root")
        #expect(try await fleet.trust()?["kind"] as? String == "keys-document")
        // The same manifest key before and after: sequence 3 stays the baseline.
        try await fleet.attack("old", leaked: "ci", sequence: 1, keys: 1)
        let replay = try await fleet.sync()
        #expect(replay.status == 4 && replay.stderr.contains("sequence 1 is lower than the accepted 3"), "\(replay.stderr)")
        #expect(try await fleet.served() == "home 3")
    }

    @Test func aKeysDocumentSignedWithStockMinisignIsFollowed() async throws {
        let fleet = try await KeysRotationTests.fleet()
        try await fleet.keygen("ci2")
        // Version 2 written and signed by hand, with `minisign -S` and the root's stock key.
        try await fleet.attack("2", leaked: "ci2", sequence: 5, keys: 2)
        try fleet.forgeKeys(version: 2, roots: ["root"], manifests: ["ci2"], signers: ["root"])
        try await fleet.sync().checked("sync under a stock-signed keys/2.json")
        #expect(try await fleet.served() == "home 2")
        #expect(try await fleet.trust()?["keysVersion"] as? Int == 2)
        #expect(try fleet.verifyEverySignatureWithStockMinisign(in: fleet.cdn) == 3)
    }

    @Test func aPublishOverALeakedKeysLastSequenceWritesNothing() async throws {
        let fleet = try await KeysRotationTests.fleet()
        // The attacker wrote into the repository folder itself, not only the CDN.
        try await fleet.attack("evil", leaked: "ci", sequence: Int.max, keys: 1)
        try shell("rm -rf \"$REPO\" && cp -a \"$CDN\" \"$REPO\"", environment: ["REPO": fleet.repo, "CDN": fleet.cdn])
        let before = try Self.snapshot(fleet.repo)
        let refused = try await fleet.publish("2", signers: ["ci"])
        #expect(refused.status == 4)
        #expect(
            refused.stderr.contains("the manifest's sequence is 9223372036854775807, the highest there is: restore the manifest"))
        #expect(try Self.snapshot(fleet.repo) == before)
    }

    @Test func aManifestSignedBySeveralKeysServesADevicePinningTheSecond() async throws {
        let fleet = try KeysFleet()
        try await fleet.keygen("ci1")
        try fleet.stockKey("ci2")
        try await fleet.publish("1", signers: ["ci1", "ci2"]).checked("publish signed twice, no keys documents")
        try fleet.upload()
        // manifest.json.minisig is ci1's; the device that pins ci2 finds its file under signatures/.
        try await fleet.sync(["--trust-key", fleet.key("ci2") + ".pub"]).checked("sync pinning ci2")
        #expect(try await fleet.served() == "home 1")
        let second = try fleet.id("ci2")
        #expect(fleet.nginx.waitForRequests(1).contains { $0.uri.hasSuffix(".\(second).minisig") && $0.status == 200 })
    }
}
