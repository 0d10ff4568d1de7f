import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// docs/protocol.md#conventions: member names are byte strings. A name that is not valid UTF-8, or holds a NUL or a control
/// character (C0, DEL, C1), refuses the archive with its bytes escaped in the message; two names that
/// differ only in Unicode normalisation are two files.
@Suite("Archive names are bytes")
struct ArchiveNameTests {
    struct Refusal: Sendable, CustomTestStringConvertible {
        var testDescription: String
        var format: String
        var members: [RawArchive.Member]
        /// The whole message after `archive NAME refused: `.
        var message: String
    }

    static let latin1 = Array("caf".utf8) + [0xe9] + Array(".txt".utf8)
    static let c1 = Array("a\u{85}b".utf8)
    static let nul = Array("ok".utf8) + [0] + Array("/../../../evil".utf8)
    static let invalid = #"entry "caf\xe9.txt": name is not valid UTF-8"#

    static let refusals: [Refusal] = [
        Refusal(testDescription: "tar, raw bytes", format: "tar", members: [.init(name: latin1)], message: invalid),
        Refusal(testDescription: "pax path", format: "tar", members: [.init(name: latin1, pax: [("path", latin1)])], message: invalid),
        Refusal(
            testDescription: "pax path, hdrcharset=BINARY", format: "tar",
            members: [.init(name: latin1, pax: [("hdrcharset", Array("BINARY".utf8)), ("path", latin1)])], message: invalid),
        Refusal(testDescription: "zip, no UTF-8 flag", format: "zip", members: [.init(name: latin1)], message: invalid),
        Refusal(testDescription: "zip, UTF-8 flag", format: "zip", members: [.init(name: latin1, utf8Flag: true)], message: invalid),
        Refusal(
            testDescription: "C1 in tar", format: "tar", members: [.init(name: c1)],
            message: #"entry "a\u{85}b": control character in path"#),
        Refusal(
            testDescription: "C1 in pax", format: "tar", members: [.init(name: c1, pax: [("path", c1)])],
            message: #"entry "a\u{85}b": control character in path"#),
        Refusal(
            testDescription: "C1 in zip", format: "zip", members: [.init(name: c1, utf8Flag: true)],
            message: #"entry "a\u{85}b": control character in path"#),
        Refusal(
            testDescription: "C0 in tar", format: "tar", members: [.init(name: Array("a\u{1}b".utf8))],
            message: #"entry "a\u{1}b": control character in path"#),
        Refusal(
            testDescription: "DEL in zip", format: "zip", members: [.init(name: Array("a\u{7F}b".utf8))],
            message: #"entry "a\u{7F}b": control character in path"#),
        Refusal(
            testDescription: "NUL in pax", format: "tar", members: [.init(name: nul, pax: [("path", nul)])],
            message: #"entry "ok\u{0}/../../../evil": NUL byte in path"#),
        Refusal(
            testDescription: "NUL in pax, gzipped", format: "tar.gz", members: [.init(name: nul, pax: [("path", nul)])],
            message: #"entry "ok\u{0}/../../../evil": NUL byte in path"#),
        Refusal(
            testDescription: "NUL in pax, after other members", format: "tar.gz",
            members: [
                .init(name: Array("a.txt".utf8), data: [UInt8](repeating: 7, count: 300_000)),
                .init(name: Self.latin1, pax: [("path", Array("caf\u{e9}.txt".utf8))]),
                .init(name: nul, pax: [("path", nul)]),
            ],
            message: #"entry "ok\u{0}/../../../evil": NUL byte in path"#),
        Refusal(
            testDescription: "NUL in a GNU long name", format: "tar", members: [.init(name: nul, gnuLongName: nul)],
            message: #"entry "ok\u{0}/../../../evil": NUL byte in path"#),
        Refusal(
            testDescription: "NUL in zip", format: "zip", members: [.init(name: nul)],
            message: #"entry "ok\u{0}/../../../evil": NUL byte in path"#),
    ]

    /// Writes the members as an archive of `format` (tar, tar.gz, zip) in `dir`.
    static func write(_ members: [RawArchive.Member], format: String, in dir: TemporaryDirectory) throws -> String {
        let bytes = format == "zip" ? RawArchive.zip(members) : RawArchive.tar(members)
        let archive = try dir.write(bytes, to: "raw.tar")
        guard format != "tar" else { return archive }
        if format == "tar.gz" { try run("gzip", ["-n", archive]).checked() }
        else { try run("mv", [archive, dir.path("raw.zip")]).checked() }
        return dir.path(format == "zip" ? "raw.zip" : "raw.tar.gz")
    }

    @Test(arguments: refusals)
    func refusesTheNameNamingItsBytes(_ refusal: Refusal) throws {
        let dir = try TemporaryDirectory()
        let archive = try Self.write(refusal.members, format: refusal.format, in: dir)
        let staging = try dir.makeDirectory("staging")
        #expect {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: archive, into: staging)
        } throws: { error in
            "\(error)" == "archive a refused: \(refusal.message)" && (error as? OfflinePkgError)?.category == .refused
        }
    }

    static let precomposed = PackagePath("caf\u{e9}.txt")
    static let decomposed = PackagePath("cafe\u{301}.txt")

    @Test(arguments: ["tar", "zip"])
    func keepsBothNormalisationFormsAsTwoFiles(_ format: String) throws {
        let dir = try TemporaryDirectory()
        let members: [RawArchive.Member] = [
            .init(name: Self.decomposed.bytes, data: Array("decomposed\n".utf8), pax: format == "tar" ? [("path", Self.decomposed.bytes)] : [], utf8Flag: true),
            .init(name: Self.precomposed.bytes, data: Array("precomposed\n".utf8), pax: format == "tar" ? [("path", Self.precomposed.bytes)] : [], utf8Flag: true),
        ]
        let archive = try Self.write(members, format: format, in: dir)
        let staging = try dir.makeDirectory("staging")
        let tree = try ArchiveUnpacker(limits: .init(), archiveName: "twins").unpack(archivePath: archive, into: staging)
        #expect(Set(tree.files.keys) == [Self.precomposed, Self.decomposed])
        #expect(try FileSystem.read(staging + "/" + Self.decomposed.string) == Array("decomposed\n".utf8))
        #expect(try FileSystem.read(staging + "/" + Self.precomposed.string) == Array("precomposed\n".utf8))
        #expect(TreeHash.compute(tree.files) == (try treeHash(of: staging)))
    }

    /// A folder holding both forms, archived by stock bsdtar under the C locale (pax `hdrcharset=BINARY`,
    /// zip names unflagged) and under a UTF-8 locale (pax UTF-8 names, zip names flagged UTF-8).
    @Test(arguments: [("-cf", "C"), ("-czf", "C"), ("-cf", "C.UTF-8"), ("--format=zip -cf", "C"), ("--format=zip -cf", "C.UTF-8")])
    func unpacksAStockArchiveOfNormalisationTwins(flags: String, locale: String) throws {
        let dir = try TemporaryDirectory()
        let site = try Self.writeTwins(in: dir)
        let archive = dir.path("twins.archive")
        try run(
            "bsdtar", flags.split(separator: " ").map(String.init) + [archive, "-C", site, "."],
            environment: ["LC_ALL": locale, "PATH": "/usr/bin:/bin"]
        ).checked()
        let staging = try dir.makeDirectory("staging")
        let tree = try ArchiveUnpacker(limits: .init(), archiveName: "twins").unpack(archivePath: archive, into: staging)
        #expect(Set(tree.files.keys) == [Self.precomposed, Self.decomposed, "plain.txt"])
        #expect(TreeHash.compute(tree.files) == (try treeHash(of: site)))
    }

    /// `site/` with `café.txt` written both ways and one ASCII file; returns its path.
    static func writeTwins(in dir: TemporaryDirectory) throws -> String {
        let site = try dir.makeDirectory("site")
        try FileSystem.writeAtomically(Array("precomposed\n".utf8), to: site + "/" + precomposed.string)
        try FileSystem.writeAtomically(Array("decomposed\n".utf8), to: site + "/" + decomposed.string)
        try FileSystem.writeAtomically(Array("plain\n".utf8), to: site + "/plain.txt")
        #expect(FileSystem.entryNames(of: site).count == 3)
        return site
    }
}

extension ArchiveNameTests {
    /// The header warnings libarchive gives for names it cannot convert under the C locale (pax and
    /// UTF-8-flagged zip names): expected, since names are taken as bytes; any other warning is not one.
    @Test func nameConversionWarningsAreTold() {
        for message in [
            "Pathname can't be converted from UTF-8 to current locale.",
            "Pathname cannot be converted from UTF-8 to current locale.",
            "Uname can't be converted from UTF-8 to current locale.",
        ] {
            #expect(ArchiveEntryName.isNameConversionWarning(message), "\(message)")
        }
        for message in ["Ignoring malformed pax extended attribute", "ZIP bad CRC: 0x1 should be 0x2", "Linkname can't be converted from UTF-8 to current locale."] {
            #expect(!ArchiveEntryName.isNameConversionWarning(message), "\(message)")
        }
    }
}
