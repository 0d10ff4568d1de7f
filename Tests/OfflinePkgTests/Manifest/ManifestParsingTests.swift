import Foundation
import Testing

@testable import OfflinePkg

@Suite("Manifest parsing")
struct ManifestParsingTests {
    static let sha = String(repeating: "a", count: 64)
    static let tree = String(repeating: "b", count: 64)

    /// A valid package entry as JSON, with `overrides` replacing or removing (NSNull) fields.
    static func package(_ overrides: [String: Any] = [:]) -> [String: Any] {
        var entry: [String: Any] = [
            "id": "home", "version": "1.4.2", "routes": ["https://m.example.com/home/"],
            "archive": ["url": "archives/home.tar.gz", "sha256": sha, "size": 10], "tree": tree,
        ]
        for (key, value) in overrides { entry[key] = value is NSNull ? nil : value }
        return entry
    }

    static func manifest(_ overrides: [String: Any] = [:], packages: [[String: Any]] = [package()]) -> [UInt8] {
        var object: [String: Any] = ["format": 1, "sequence": 42, "packages": packages]
        for (key, value) in overrides { object[key] = value is NSNull ? nil : value }
        return Array(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    static func parse(_ bytes: [UInt8]) throws -> Manifest { try Manifest(parsing: bytes, source: "m.json") }

    @Test func parsesTheSpecExample() throws {
        let bytes = Self.manifest(
            ["expires": "2027-01-31T00:00:00Z", "unknown": ["ignored": true]],
            packages: [
                Self.package([
                    "entry": "main.html", "fallback": "index.html", "minShellVersion": "3.2", "rollout": 25,
                    "deltas": [["from": "1.4.1", "url": "d.tar.gz", "sha256": Self.sha, "size": 5]],
                ])
            ])
        let manifest = try Self.parse(bytes)
        #expect(manifest.sequence == 42)
        #expect(manifest.expires == RFC3339.parse("2027-01-31T00:00:00Z"))
        let entry = try #require(manifest.packages.first)
        #expect(entry.id == "home" && entry.version == "1.4.2" && entry.entry == "main.html")
        #expect(entry.fallback == "index.html" && entry.minShellVersion == "3.2" && entry.rollout == 25)
        #expect(entry.archive == RemoteFile(url: "archives/home.tar.gz", sha256: Self.sha, size: 10))
        #expect(entry.deltas == [Delta(from: "1.4.1", file: RemoteFile(url: "d.tar.gz", sha256: Self.sha, size: 5))])
    }

    /// Every form RFC 3339 §5.6 allows names the same instant: lowercase "t" and "z", fractions, offsets.
    @Test(arguments: [
        "2027-01-31T12:00:00Z", "2027-01-31t12:00:00z", "2027-01-31T12:00:00.000Z", "2027-01-31t12:00:00.5z",
        "2027-01-31T14:30:00+02:30", "2027-01-31T09:00:00-03:00",
    ])
    func expiresTakesEveryRFC3339Form(_ text: String) throws {
        let manifest = try Self.parse(Self.manifest(["expires": text]))
        let noon = Date(timeIntervalSince1970: 1_801_396_800)  // 2027-01-31T12:00:00Z
        #expect(abs(try #require(manifest.expires).timeIntervalSince(noon)) < 1)
    }

    @Test func entryDefaultsToIndexHTML() throws {
        #expect(try Self.parse(Self.manifest()).packages[0].entry == "index.html")
    }

    /// A broken manifest and the field its error must name.
    struct InvalidCase: Sendable, CustomTestStringConvertible {
        var name: String
        var bytes: [UInt8]
        var field: String
        var testDescription: String { name }
    }

    static let invalid: [InvalidCase] = [
        .init(name: "format missing", bytes: manifest(["format": NSNull()]), field: "format"),
        .init(name: "format zero", bytes: manifest(["format": 0]), field: "format"),
        .init(name: "format fractional", bytes: manifest(["format": 1.5]), field: "format"),
        .init(name: "format boolean", bytes: manifest(["format": true]), field: "format"),
        .init(name: "sequence zero", bytes: manifest(["sequence": 0]), field: "sequence"),
        .init(
            name: "sequence past Int64", bytes: Array(#"{"format":1,"sequence":9223372036854775808,"packages":[]}"#.utf8),
            field: "sequence"),
        .init(
            name: "sequence past UInt64", bytes: Array(#"{"format":1,"sequence":18446744073709551617,"packages":[]}"#.utf8),
            field: "sequence"),
        .init(name: "sequence string", bytes: manifest(["sequence": "42"]), field: "sequence"),
        .init(name: "expires not RFC 3339", bytes: manifest(["expires": "tomorrow"]), field: "expires"),
        .init(name: "packages not a list", bytes: manifest(["packages": "x"]), field: "packages"),
        .init(name: "id uppercase", bytes: manifest(packages: [package(["id": "Home"])]), field: "packages[0].id"),
        .init(
            name: "id too long", bytes: manifest(packages: [package(["id": String(repeating: "a", count: 65)])]),
            field: "packages[0].id"),
        .init(name: "id starts with dot", bytes: manifest(packages: [package(["id": ".home"])]), field: "packages[0].id"),
        .init(
            name: "version with slash", bytes: manifest(packages: [package(["version": "1/2"])]),
            field: "packages[0] (home).version"),
        .init(name: "version empty", bytes: manifest(packages: [package(["version": ""])]), field: "packages[0] (home).version"),
        .init(
            name: "routes empty", bytes: manifest(packages: [package(["routes": [String]()])]), field: "packages[0] (home).routes"
        ),
        .init(
            name: "route without slash", bytes: manifest(packages: [package(["routes": ["https://m.example.com/home"]])]),
            field: "packages[0] (home).routes[0]"),
        .init(
            name: "route relative", bytes: manifest(packages: [package(["routes": ["/home/"]])]),
            field: "packages[0] (home).routes[0]"),
        .init(
            name: "route ftp", bytes: manifest(packages: [package(["routes": ["ftp://m.example.com/"]])]),
            field: "packages[0] (home).routes[0]"),
        .init(
            name: "entry escapes", bytes: manifest(packages: [package(["entry": "../x.html"])]), field: "packages[0] (home).entry"
        ),
        .init(
            name: "fallback absolute", bytes: manifest(packages: [package(["fallback": "/index.html"])]),
            field: "packages[0] (home).fallback"),
        .init(
            name: "sha256 uppercase",
            bytes: manifest(packages: [package(["archive": ["url": "a", "sha256": sha.uppercased(), "size": 1]])]),
            field: "packages[0] (home).archive.sha256"),
        .init(
            name: "size negative", bytes: manifest(packages: [package(["archive": ["url": "a", "sha256": sha, "size": -1]])]),
            field: "packages[0] (home).archive.size"),
        .init(
            name: "archive missing", bytes: manifest(packages: [package(["archive": NSNull()])]),
            field: "packages[0] (home).archive"),
        .init(name: "tree short", bytes: manifest(packages: [package(["tree": "abc"])]), field: "packages[0] (home).tree"),
        .init(name: "rollout 101", bytes: manifest(packages: [package(["rollout": 101])]), field: "packages[0] (home).rollout"),
        .init(
            name: "minShellVersion text", bytes: manifest(packages: [package(["minShellVersion": "three"])]),
            field: "packages[0] (home).minShellVersion"),
        .init(
            name: "delta from invalid",
            bytes: manifest(packages: [package(["deltas": [["from": "a b", "url": "d", "sha256": sha, "size": 1]]])]),
            field: "packages[0] (home).deltas[0].from"),
        .init(
            name: "duplicate id", bytes: manifest(packages: [package(), package(["routes": ["https://m.example.com/other/"]])]),
            field: "packages[1].id"),
        .init(
            name: "duplicate route", bytes: manifest(packages: [package(), package(["id": "other"])]), field: "packages[1].routes"
        ),
        .init(
            name: "route duplicate up to the scheme",
            bytes: manifest(packages: [package(), package(["id": "other", "routes": ["http://m.example.com/home/"]])]),
            field: "packages[1].routes"),
    ]

    @Test(arguments: invalid)
    func refusesNamingTheField(_ invalid: InvalidCase) {
        #expect {
            try Self.parse(invalid.bytes)
        } throws: { error in
            guard case .invalidManifest(_, let reported, _) = error as? OfflinePkgError else { return false }
            return reported == invalid.field
        }
    }

    @Test func refusesANewerFormatAskingForANewerOfflinepkg() {
        #expect {
            try Self.parse(Self.manifest(["format": 2]))
        } throws: { error in
            "\(error)".contains("needs a newer offlinepkg") && (error as? OfflinePkgError)?.category == .refused
        }
    }

    @Test func refusesMoreThan16MiB() {
        var bytes = Self.manifest()
        bytes.append(contentsOf: [UInt8](repeating: 0x20, count: Manifest.maximumSize))
        #expect(throws: OfflinePkgError.self) { try Self.parse(bytes) }
    }

    @Test func refusesNonJSON() {
        #expect(
            throws: OfflinePkgError.invalidManifest(
                source: "m.json", field: "(document)", reason: "not valid JSON: expected a key string, got \"n\" at line 1, column 2")
        ) {
            try Self.parse(Array("{nope".utf8))
        }
    }

    @Test func nestedRoutesAreFine() throws {
        let manifest = try Self.parse(
            Self.manifest(packages: [
                Self.package(["routes": ["https://m.example.com/"]]),
                Self.package(["id": "docs", "routes": ["https://m.example.com/docs/"]]),
            ]))
        #expect(manifest.packages.count == 2)
    }

    @Test(arguments: [("3.2", "3.2.0", 0), ("3.10", "3.9", 1), ("2", "3.0.1", -1), ("1.0.0", "1", 0)])
    func shellVersionsCompareNumerically(_ left: String, _ right: String, _ order: Int) throws {
        let a = try #require(ShellVersion(left))
        let b = try #require(ShellVersion(right))
        #expect((a < b ? -1 : (b < a ? 1 : 0)) == order)
    }

    @Test func rolloutBucketFollowsTheSpecFormula() {
        // sha256("dev:home:1.0") starts with bytes whose big-endian value mod 100 is the bucket.
        let digest = SHA256.hash(Array("dev:home:1.0".utf8)).bytes
        let expected = Int((UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])) % 100)
        #expect(Rollout.bucket(deviceID: "dev", packageID: "home", version: "1.0") == expected)
    }

    @Test func hugeNumbersAreNamedAsSuch() {
        #expect {
            try Self.parse(Array(#"{"format":1,"sequence":9223372036854775808,"packages":[]}"#.utf8))
        } throws: { "\($0)".contains("too large for 64 bits") }
    }
}

@Suite("Manifest archive.files")
struct ManifestFileIndexFieldTests {
    static let sha = String(repeating: "c", count: 64)

    static func parse(files: Any?) throws -> PackageEntry {
        var archive: [String: Any] = ["url": "archives/home.tar.zst", "sha256": ManifestParsingTests.sha, "size": 10]
        if let files { archive["files"] = files }
        let bytes = ManifestParsingTests.manifest(packages: [ManifestParsingTests.package(["archive": archive])])
        return try ManifestParsingTests.parse(bytes).packages[0]
    }

    @Test func readsTheFileIndexReference() throws {
        let entry = try Self.parse(files: ["url": "files/\(Self.sha).json.zst", "sha256": Self.sha, "size": 321])
        #expect(entry.archive.files == FileIndexReference(url: "files/\(Self.sha).json.zst", sha256: Self.sha, size: 321))
        #expect(try Self.parse(files: nil).archive.files == nil)
        #expect(try Self.parse(files: NSNull()).archive.files == nil)
    }

    @Test(arguments: [
        ("f.json.zst" as String?, "ABC", 1, "packages[0] (home).archive.files.sha256"),
        ("f.json.zst", sha, -1, "packages[0] (home).archive.files.size"),
        ("", sha, 1, "packages[0] (home).archive.files.url"),
        (nil, sha, 1, "packages[0] (home).archive.files.url"),
    ])
    func refusesABadReferenceNamingTheField(_ url: String?, _ sha256: String, _ size: Int, _ field: String) {
        var files: [String: Any] = ["sha256": sha256, "size": size]
        if let url { files["url"] = url }
        #expect {
            try Self.parse(files: files)
        } throws: { error in
            guard case .invalidManifest(_, let reported, _) = error as? OfflinePkgError else { return false }
            return reported == field
        }
        #expect(throws: OfflinePkgError.self) { try Self.parse(files: "files/x.json.zst") }
    }
}
