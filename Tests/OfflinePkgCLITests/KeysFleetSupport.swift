import Foundation
import OfflinePkg
import OfflinePkgPublish
import OfflinePkgTestSupport
import Testing

/// A publisher with root and manifest keys (made by `offlinepkg keygen` or stock `minisign -G -W`), its
/// repository, a CDN folder that nginx serves (what `upload()` copies the repository to, and where an
/// attacker drops files), and a device root — all driven through the command line, in process (the binary
/// only where a process is the point: a fail point)
/// (docs/protocol.md#keys-documents).
final class KeysFleet: @unchecked Sendable {
    // Used from one test at a time.
    let scratch: TemporaryDirectory
    let nginx: NginxServer
    var repo: String { scratch.path("repo") }
    var cdn: String { scratch.path("cdn") }
    var root: String { scratch.path("root") }
    var manifestURL: String { nginx.url("manifest.json").absoluteString }
    private var uploads = 0
    /// The clock every command of this fleet reads (the publisher's and the device's): a test moves it
    /// forward instead of waiting.
    var clock = WallClock.system

    init() throws {
        scratch = try TemporaryDirectory(prefix: "offlinepkg-keys")
        try scratch.makeDirectory("cdn")
        nginx = try NginxServer(documentRoot: scratch.path("cdn"))
    }

    func key(_ name: String) -> String { scratch.path("keys/" + name) }

    /// `offlinepkg keygen keys/<name>`.
    func keygen(_ name: String) async throws {
        try scratch.makeDirectory("keys")
        try await offlinepkg(["keygen", key(name)]).checked("keygen \(name)")
    }

    /// `minisign -G -W`: a stock key pair without a password, `keys/<name>.pub` and `keys/<name>.key`.
    func stockKey(_ name: String) throws {
        try scratch.makeDirectory("keys")
        try run("minisign", ["-G", "-W", "-p", key(name) + ".pub", "-s", key(name) + ".key"]).checked("minisign -G \(name)")
    }

    /// The key id of `keys/<name>.pub`, 16 upper-case hex digits.
    func id(_ name: String) throws -> String { try TrustedKey(contentsOfFile: key(name) + ".pub").keyID }

    /// `offlinepkg` with `arguments`, in process, on this fleet's clock; the result whatever its status.
    @discardableResult
    func offlinepkg(_ arguments: [String]) async -> ProcessResult {
        await InProcessCLI.run(arguments, world: World(clock: clock))
    }

    /// `keys init` with root keys `roots` (secret keys that sign) and manifest keys `manifests`.
    @discardableResult
    func keysInit(roots: [String], manifests: [String], _ extra: [String] = []) async throws -> ProcessResult {
        try await offlinepkg(
            ["keys", "init", "--repo", repo] + roots.flatMap { ["--sign-key", key($0) + ".key"] }
                + manifests.flatMap { ["--manifest-key", key($0) + ".pub"] } + extra
        ).checked("keys init")
    }

    /// `keys rotate` signed by `signers`, with `options` such as `--remove-manifest-key`, `keys/ci.pub`
    /// written as `@ci` (the public key of that name).
    func rotate(signers: [String], _ options: [String] = []) async -> ProcessResult {
        let expanded = options.map { $0.hasPrefix("@") ? key(String($0.dropFirst())) + ".pub" : $0 }
        return await offlinepkg(
            ["keys", "rotate", "--repo", repo] + signers.flatMap { ["--sign-key", key($0) + ".key"] } + expanded)
    }

    /// Publishes `home <version>` into `repository` (default: the publisher's), signed by `signers`.
    @discardableResult
    func publish(_ version: String, signers: [String], repository: String? = nil) async throws -> ProcessResult {
        let site = scratch.path("sites/\(version)")
        try? FileManager.default.removeItem(atPath: site)
        try writeSite([SiteFile("index.html", "home \(version)")], to: site)
        return await offlinepkg(
            [
                "publish", site, "--repo", repository ?? repo, "--id", "home", "--version", version, "--route",
                "https://m.example.com/",
                "--quiet",
            ] + signers.flatMap { ["--sign-key", key($0) + ".key"] })
    }

    /// Copies the repository to the CDN folder, replacing whatever is there, as a deploy step would.
    func upload() throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: cdn) {
            try FileManager.default.removeItem(atPath: cdn + "/" + name)
        }
        try shell(
            "cp -a \"$REPO\"/. \"$CDN\"/ && rm -rf \"$CDN/.tmp\" \"$CDN/.publish.lock\"", environment: ["REPO": repo, "CDN": cdn])
        touchManifest()
    }

    /// nginx's ETag and Last-Modified have one-second resolution: each change of the manifest gets a
    /// later mtime, so a conditional request never takes a new manifest for the old one.
    func touchManifest() {
        uploads += 1
        for name in ["manifest.json", "manifest.json.minisig"] where FileManager.default.fileExists(atPath: cdn + "/" + name) {
            try? FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(Double(uploads))], ofItemAtPath: cdn + "/" + name)
        }
    }

    /// `offlinepkg sync` of the CDN's manifest into the device root, plus `options` (`--trust-root` a
    /// file given as `@keys/1.json` is the publisher's `keys/1.json`).
    func sync(_ options: [String] = []) async -> ProcessResult {
        await offlinepkg(["sync", manifestURL, "--root", root, "--quiet"] + expand(options))
    }

    /// The same sync by the binary, in a process of its own, with `environment` (a fail point).
    func syncInProcessOfItsOwn(_ options: [String] = [], environment: [String: String]) throws -> ProcessResult {
        try OfflinePkgBinary.run(["sync", manifestURL, "--root", root, "--quiet"] + expand(options), environment: environment)
    }

    private func expand(_ options: [String]) -> [String] {
        options.map { $0.hasPrefix("@") ? repo + "/" + $0.dropFirst() : $0 }
    }

    /// The home page the device serves, or nil on a miss.
    func served() async throws -> String? {
        let lookup = await offlinepkg(["lookup", "https://m.example.com/", "--root", root])
        guard lookup.status == 0 else { return nil }
        return try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8)
    }

    /// `status --json` as an object.
    func status() async throws -> [String: Any] {
        try jsonObject(try await offlinepkg(["status", "--root", root, "--json"]).checked("status").stdout)
    }

    /// What the device trusts for the CDN's manifest URL (`status --json`'s `trust` entry), or nil.
    func trust() async throws -> [String: Any]? {
        (try await status()["trust"] as? [[String: Any]])?.first { $0["manifestURL"] as? String == manifestURL }
    }

    /// The device root's state and active set, byte for byte: what "nothing changed" compares.
    func deviceRecord() async throws -> DeviceRecord {
        let trust = try await trust().map { try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]) } ?? Data()
        return DeviceRecord(
            trust: String(decoding: trust, as: UTF8.self), active: FileManager.default.contents(atPath: root + "/active.json"))
    }

    struct DeviceRecord: Equatable {
        var trust: String
        var active: Data?
    }

    /// An attacker holding the secret key `keys/<leaked>.key`: publishes `home <version>` into a copy of
    /// the honest repository (its keys documents set aside, which would refuse a removed key), sets the
    /// manifest's sequence and the keys version it names, signs the result with stock `minisign -S`
    /// (`.minisig` and `signatures/<sha256>.<KEYID>.minisig`) and puts it on the CDN.
    func attack(_ version: String, leaked: String, sequence: Int, keys: Int) async throws {
        let copy = scratch.path("attacker-\(version)")
        try? FileManager.default.removeItem(atPath: copy)
        try shell("cp -a \"$REPO\" \"$COPY\" && rm -rf \"$COPY/keys\"", environment: ["REPO": repo, "COPY": copy])
        try await publish(version, signers: [leaked], repository: copy).checked("the attacker's publish")
        if FileManager.default.fileExists(atPath: cdn + "/keys") {
            try shell("cp -a \"$CDN/keys\" \"$COPY/keys\"", environment: ["CDN": cdn, "COPY": copy])
        }
        let path = copy + "/manifest.json"
        var manifest = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        manifest["sequence"] = sequence
        manifest["keys"] = keys
        try JSONSerialization.data(withJSONObject: manifest, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
            .write(to: URL(fileURLWithPath: path))
        try stockSign(path, with: leaked, to: path + ".minisig")
        let digest = try shell("sha256sum \"$M\" | cut -c1-64", environment: ["M": path]).trimmingCharacters(
            in: .whitespacesAndNewlines)
        try FileManager.default.copyItem(
            atPath: path + ".minisig", toPath: copy + "/signatures/\(digest).\(try id(leaked)).minisig")
        try shell("rm -rf \"$CDN\"/* && cp -a \"$COPY\"/. \"$CDN\"/", environment: ["CDN": cdn, "COPY": copy])
        touchManifest()
    }

    /// `minisign -S -s keys/<key>.key -m file -x signature`.
    func stockSign(_ file: String, with key: String, to signature: String) throws {
        try? FileManager.default.removeItem(atPath: signature)
        try run("minisign", ["-S", "-s", self.key(key) + ".key", "-m", file, "-x", signature, "-t", "offlinepkg test"])
            .checked("minisign -S \(file)")
    }

    /// Writes keys document `version` into the CDN's `keys/` by hand (`KeysDocument.encode`), signed with
    /// stock minisign by `signers`: what an attacker, or a careless hand, would upload.
    func forgeKeys(
        version: Int, roots: [String], rootThreshold: Int = 1, manifests: [String], manifestThreshold: Int = 1, signers: [String],
        expires: Date = Date().addingTimeInterval(86_400)
    ) throws {
        func role(_ names: [String], _ threshold: Int) throws -> KeysDocument.Role {
            KeysDocument.Role(keys: try names.map { try TrustedKey(contentsOfFile: key($0) + ".pub") }, threshold: threshold)
        }
        let bytes = KeysDocument.encode(
            version: version, expires: expires, root: try role(roots, rootThreshold),
            manifest: try role(manifests, manifestThreshold))
        let path = cdn + "/keys/\(version).json"
        try writeFile(bytes, to: path)
        for signer in signers { try stockSign(path, with: signer, to: path + ".\(try id(signer)).minisig") }
    }

    /// Checks every signature under `folder` with stock `minisign -V`: each keys document's by the root key
    /// its file names (from that version or the one before), and the manifest's by its manifest keys.
    func verifyEverySignatureWithStockMinisign(in folder: String) throws -> Int {
        var keysByID = [String: TrustedKey]()
        var verified = 0
        let keyFiles = (try? FileManager.default.contentsOfDirectory(atPath: folder + "/keys")) ?? []
        let versions = keyFiles.compactMap { $0.hasSuffix(".json") ? Int($0.dropLast(5)) : nil }.sorted()
        for version in versions {
            let document = try KeysDocument(
                bytes: Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/keys/\(version).json"))), source: "test")
            for key in document.root.keys + document.manifest.keys { keysByID[key.keyID] = key }
            for name in keyFiles where name.hasPrefix("\(version).json.") && name.hasSuffix(".minisig") {
                let keyID = String(name.dropFirst("\(version).json.".count).dropLast(".minisig".count))
                let key = try #require(keysByID[keyID], "no key \(keyID) for keys/\(name)")
                let result = try run(
                    "minisign",
                    ["-V", "-m", folder + "/keys/\(version).json", "-x", folder + "/keys/" + name, "-P", key.minisignPublicKey])
                #expect(result.status == 0, "minisign -V keys/\(name): \(result.stderr)")
                verified += 1
            }
        }
        let manifest = folder + "/manifest.json"
        let digest = try shell("sha256sum \"$M\" | cut -c1-64", environment: ["M": manifest]).trimmingCharacters(
            in: .whitespacesAndNewlines)
        let signatures = (try? FileManager.default.contentsOfDirectory(atPath: folder + "/signatures")) ?? []
        for name in signatures where name.hasPrefix(digest + ".") && name.split(separator: ".").count == 3 {
            let keyID = String(name.split(separator: ".")[1])
            let key = try #require(keysByID[keyID], "no key \(keyID) for signatures/\(name)")
            let result = try run(
                "minisign", ["-V", "-m", manifest, "-x", folder + "/signatures/" + name, "-P", key.minisignPublicKey])
            #expect(result.status == 0, "minisign -V signatures/\(name): \(result.stderr)")
            verified += 1
        }
        return verified
    }
}
