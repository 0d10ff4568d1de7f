import Foundation
import Testing

@testable import OfflinePkg

/// The manifest is read one way only: duplicate keys, numbers that are not written as
/// integers, lone surrogates and control characters in names are refused, each naming the field.
@Suite("Manifest strict JSON")
struct ManifestStrictJSONTests {
    static let sha = String(repeating: "a", count: 64)
    static let tree = String(repeating: "b", count: 64)

    /// A valid manifest as text, one package, with `packageExtra` spliced into the package object,
    /// `archiveExtra` into its archive and `topExtra` into the top level (each a `"key": value,` run).
    static func text(top topExtra: String = "", package packageExtra: String = "", archive archiveExtra: String = "") -> String {
        """
        {\(topExtra)"format": 1, "sequence": 7, "packages": [{\(packageExtra)"id": "home", "version": "1.0",
         "routes": ["https://m.example.com/home/"],
         "archive": {\(archiveExtra)"url": "archives/home.tar.gz", "sha256": "\(sha)", "size": 10}, "tree": "\(tree)"}]}
        """
    }

    static func refusal(_ text: String) -> (field: String, reason: String)? {
        do {
            _ = try Manifest(parsing: Array(text.utf8), source: "m.json")
            return nil
        } catch OfflinePkgError.invalidManifest(_, let field, let reason) {
            return (field, reason)
        } catch {
            Issue.record("expected an invalid manifest, got \(error)")
            return nil
        }
    }

    @Test func theTemplateParses() throws {
        let manifest = try Manifest(parsing: Array(Self.text().utf8), source: "m.json")
        #expect(manifest.packages.map(\.id) == ["home"])
    }

    /// A manifest text, the field its refusal must name, and a detail of the reason.
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var text: String
        var field: String
        var detail = ""
        var testDescription: String { name }
    }

    static let duplicates: [Case] = [
        .init(name: "top level", text: text(top: #""sequence": 8, "#), field: "(document)", detail: "sequence"),
        .init(name: "inside a package", text: text(package: #""version": "2.0", "#), field: "packages[0]", detail: "version"),
        .init(name: "inside archive", text: text(archive: #""url": "evil.tar.gz", "#), field: "packages[0].archive", detail: "url"),
        .init(
            name: "inside an unknown field", text: text(package: #""x-extra": {"list": [1, {"a": 1, "b": 2, "a": 3}]}, "#),
            field: "packages[0].x-extra.list[1]", detail: "a"),
        .init(
            name: "spelled with an escape", text: text(package: #""versio\u006e": "2.0", "#), field: "packages[0]", detail: "version"),
    ]

    @Test(arguments: duplicates)
    func duplicateKeysAreRefusedNamingKeyAndPlace(_ duplicate: Case) {
        let refusal = Self.refusal(duplicate.text)
        #expect(refusal?.field == duplicate.field)
        #expect(refusal?.reason == "duplicate key \"\(duplicate.detail)\"")
    }

    @Test func theMessageReadsAsTheIssueAsks() {
        #expect {
            try Manifest(parsing: Array(Self.text(package: #""version": "2.0", "#).utf8), source: "m.json")
        } throws: { "\($0)" == "invalid manifest m.json: packages[0]: duplicate key \"version\"" }
    }

    /// Small objects compare each key with the earlier ones, larger ones hash them: a duplicate is
    /// found on either side of the change, and wherever its twin is.
    @Test(arguments: [3, 15, 16, 17, 40])
    func duplicatesAreFoundInObjectsOfAnySize(_ members: Int) throws {
        let keys = (0..<members).map { "\"k\($0)\": \($0)" }
        let distinct = "{" + keys.joined(separator: ", ") + "}"
        #expect(try JSONDocument(parsing: Array(distinct.utf8)).root.object?.members.count == members)
        for twin in [0, members / 2, members - 1] {
            let text = "{" + keys.joined(separator: ", ") + ", \"k\(twin)\": 0}"
            #expect(throws: JSONDocument.Failure(path: "", reason: "duplicate key \"k\(twin)\"")) {
                try JSONDocument(parsing: Array(text.utf8))
            }
        }
    }

    /// Keys are compared by their bytes: the two Unicode normalisation forms of "café" are two keys.
    @Test func normalisationTwinsAreTwoKeys() throws {
        let text = Self.text(package: #""x": {"caf\u00e9": 1, "cafe\u0301": 2}, "#)
        let document = try JSONDocument(parsing: Array(text.utf8))
        let package = try #require(document.root.object?["packages"]?.array?.first?.object)
        #expect(package["x"]?.object?.members.map(\.key.utf8.count) == [5, 6])
        _ = try Manifest(parsing: Array(text.utf8), source: "m.json")
    }

    @Test(arguments: ["1.0000000000000000001", "1.5", "1e3", "1.0", "10E-1", "-0.0"])
    func nonIntegersAreNotIntegers(_ literal: String) {
        for (text, field) in [
            (Self.text().replacingOccurrences(of: #""sequence": 7"#, with: #""sequence": \#(literal)"#), "sequence"),
            (Self.text(package: #""rollout": \#(literal), "#), "packages[0] (home).rollout"),
            (Self.text().replacingOccurrences(of: #""size": 10"#, with: #""size": \#(literal)"#), "packages[0] (home).archive.size"),
        ] {
            let refusal = Self.refusal(text)
            #expect(refusal?.field == field)
            #expect(refusal?.reason == "expected an integer, got \(literal), which is not an integer")
        }
    }

    @Test(arguments: ["9223372036854775808", "18446744073709551617", "-9223372036854775809", String(repeating: "9", count: 400)])
    func hugeIntegersAreTooLargeFor64Bits(_ literal: String) {
        let refusal = Self.refusal(Self.text().replacingOccurrences(of: #""size": 10"#, with: #""size": \#(literal)"#))
        #expect(refusal?.field == "packages[0] (home).archive.size")
        #expect(refusal?.reason == "expected an integer, got \(literal), a number too large for 64 bits")
    }

    @Test func largestIntegerIsRead() throws {
        let text = Self.text().replacingOccurrences(of: #""sequence": 7"#, with: #""sequence": 9223372036854775807"#)
        #expect(try Manifest(parsing: Array(text.utf8), source: "m.json").sequence == Int.max)
    }

    @Test func aThousandDeepValueInAnUnknownFieldIsAccepted() throws {
        let deep = String(repeating: "[", count: 1000) + "{\"k\": \"v\"}" + String(repeating: "]", count: 1000)
        let manifest = try Manifest(parsing: Array(Self.text(package: "\"x\": \(deep), ").utf8), source: "m.json")
        #expect(manifest.packages.count == 1)
    }

    @Test func nestingUpToTheLimitIsAcceptedAndOneMoreIsNot() throws {
        // The top-level object is one level, the package list two, the package three.
        let allowed = JSONDocument.maximumDepth - 3
        let fits = String(repeating: "[", count: allowed) + String(repeating: "]", count: allowed)
        _ = try Manifest(parsing: Array(Self.text(package: "\"x\": \(fits), ").utf8), source: "m.json")
        let over = "[" + fits + "]"
        let refusal = Self.refusal(Self.text(package: "\"x\": \(over), "))
        #expect(refusal?.reason == "nested deeper than \(JSONDocument.maximumDepth) levels")
        #expect(refusal?.field.hasPrefix("packages[0].x[0][0]") == true)
    }

    @Test func aHundredThousandDeepValueIsRefusedClearly() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let refusal = Self.refusal(Self.text(top: "\"x\": \(deep), "))
        #expect(refusal?.reason == "nested deeper than 10000 levels")
    }

    static let controls: [Case] = [
        .init(
            name: "NUL in the archive URL", text: text().replacingOccurrences(of: "archives/home.tar.gz", with: #"a.tgz\u0000junk"#),
            field: "packages[0] (home).archive.url"),
        .init(
            name: "newline in the archive URL", text: text().replacingOccurrences(of: "archives/home.tar.gz", with: #"a.tgz\nHost: x"#),
            field: "packages[0] (home).archive.url"),
        .init(
            name: "C1 control in the archive URL", text: text().replacingOccurrences(of: "archives/home.tar.gz", with: #"a\u0085.tgz"#),
            field: "packages[0] (home).archive.url"),
        .init(
            name: "NUL in a route", text: text().replacingOccurrences(of: "/home/", with: #"/ho\u0000me/"#),
            field: "packages[0] (home).routes[0]"),
        .init(name: "NUL in the id", text: text().replacingOccurrences(of: #""home""#, with: #""ho\u0000me""#), field: "packages[0].id"),
        .init(
            name: "tab in the version", text: text().replacingOccurrences(of: #""1.0""#, with: #""1.0\t""#),
            field: "packages[0] (home).version"),
        .init(name: "NUL in the entry", text: text(package: #""entry": "a\u0000.html", "#), field: "packages[0] (home).entry"),
        .init(
            name: "escape in a delta URL",
            text: text(package: #""deltas": [{"from": "0.9", "url": "d\u001b[2J.tgz", "sha256": "\#(sha)", "size": 1}], "#),
            field: "packages[0] (home).deltas[0].url"),
    ]

    @Test(arguments: controls)
    func controlCharactersInNamesAreRefusedAsAnInvalidManifest(_ control: Case) {
        let refusal = Self.refusal(control.text)
        #expect(refusal?.field == control.field)
        #expect(refusal?.reason.contains("control character") == true, "\(refusal?.reason ?? "accepted")")
        // The message escapes the value: no raw control byte reaches a terminal or a log.
        #expect(refusal?.reason.unicodeScalars.contains { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) } == false)
    }

    @Test func aNULInAnUnknownFieldIsJustText() throws {
        _ = try Manifest(parsing: Array(Self.text(package: #""x-note": "a\u0000b", "#).utf8), source: "m.json")
    }

    static let syntax: [Case] = [
        .init(
            name: "lone high surrogate", text: text(package: #""x": "\ud800", "#), field: "packages[0].x",
            detail: "lone high surrogate \\ud800 not followed by a low one"),
        .init(
            name: "lone low surrogate", text: text(package: #""x": "\udc00x", "#), field: "packages[0].x",
            detail: "lone low surrogate \\udc00"),
        .init(
            name: "high surrogate then a non-surrogate", text: text(package: #""x": "\ud83d\u0041", "#), field: "packages[0].x",
            detail: "lone high surrogate \\ud83d not followed by a low one"),
        .init(
            name: "raw control byte in a string", text: text(package: "\"x\": \"a\u{1}b\", "), field: "packages[0].x",
            detail: "control byte 0x01 inside a string"),
        .init(name: "trailing comma", text: text(top: #""x": [1,], "#), field: "x[1]", detail: "expected a value, got \"]\""),
        .init(name: "leading zero", text: text(top: #""x": 01, "#), field: "x", detail: "a number may not start with 0"),
        .init(name: "bare word", text: text(top: #""x": nan, "#), field: "x", detail: "expected a value, got \"n\""),
        .init(name: "single quotes", text: text(top: "'x': 1, "), field: "(document)", detail: "expected a key string, got \"'\""),
        .init(name: "text after the document", text: text() + " {}", field: "(document)", detail: "after the end of the document"),
        .init(name: "invalid escape", text: text(package: #""x": "\x41", "#), field: "packages[0].x", detail: "invalid escape \"\\x\""),
    ]

    @Test(arguments: syntax)
    func syntaxErrorsSayWhatAndWhere(_ case: Case) {
        let refusal = Self.refusal(`case`.text)
        #expect(refusal?.field == `case`.field)
        #expect(refusal?.reason.hasPrefix("not valid JSON: ") == true)
        #expect(refusal?.reason.contains(`case`.detail) == true, "\(refusal?.reason ?? "accepted")")
        #expect(refusal?.reason.contains(" at line ") == true)
    }

    @Test func invalidUTF8IsRefused() {
        var bytes = Array(Self.text(package: #""x": "ab", "#).utf8)
        let index = bytes.firstIndex(of: UInt8(ascii: "b"))!
        bytes[index] = 0xff
        #expect {
            try Manifest(parsing: bytes, source: "m.json")
        } throws: { "\($0)".contains("packages[0].x: not valid JSON: string is not valid UTF-8") }
    }

    @Test func aValidSurrogatePairDecodes() throws {
        let document = try JSONDocument(parsing: Array(#"{"x": "\ud83d\ude00 \u00e9\/\"\\\b\f\n\r\t"}"#.utf8))
        #expect(document.root.object?["x"]?.string == "\u{1F600} \u{E9}/\"\\\u{8}\u{C}\n\r\t")
    }

    /// Every document Foundation writes reads back to the same values.
    @Test func agreesWithFoundationOnWhatItWrites() throws {
        let value: [String: Any] = [
            "a": [1, -2, 3.25, "x", true, false, NSNull(), ["nested": ["deep": [[], [:]]]]], "é": "ü\u{0}\u{1F600}", "": 0,
        ]
        let data = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])
        let document = try JSONDocument(parsing: Array(data))
        func plain(_ value: JSONValue) -> Any {
            switch value.kind {
            case .null: NSNull()
            case .boolean: value.boolean!
            case .number: Double(value.number!.literal)!
            case .string: value.string!
            case .array: value.array!.map(plain)
            case .object: Dictionary(uniqueKeysWithValues: value.object!.members.map { ($0.key, plain($0.value)) })
            }
        }
        let roundTrip = try JSONSerialization.data(withJSONObject: plain(document.root), options: [.sortedKeys])
        #expect(roundTrip == data)
    }
}
