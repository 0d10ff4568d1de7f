import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// `publish` handles site names as bytes (docs/protocol.md#conventions, #the-tree-hash): both Unicode normalisation forms of a name are
/// two files, a name that is not UTF-8 is refused naming its bytes, and names starting with `-` hash as
/// the coreutils pipeline hashes them.
@Suite("Publish: names are bytes")
struct PublishNameTests {
    static let precomposed = "caf\u{e9}.txt"
    static let decomposed = "cafe\u{301}.txt"

    @Test(arguments: [ArchiveFormat.tarZstd, .tarGzip, .zip])
    func countsBothNormalisationFormsAndWritesTheCoreutilsTreeHash(_ format: ArchiveFormat) throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-twins")
        let site = scratch.path("site")
        try writeSite(["index.html": Array("home".utf8)], to: site)
        // Two writes: as `String` keys of one dictionary the two names would be one.
        try writeSite([Self.precomposed: Array("precomposed".utf8)], to: site)
        try writeSite([Self.decomposed: Array("decomposed".utf8)], to: site)
        #expect(FileSystem.entryNames(of: site).count == 3)

        let report = try Publisher(repository: URL(fileURLWithPath: scratch.path("repo"))).publish(
            DemoSite.request(site: site, version: 1, format: format))
        #expect(report.files == 3)
        #expect(report.tree == (try treeHash(of: site)))
        // A device reads the publisher's archive back to the same two files.
        let staging = scratch.path("staging")
        try FileSystem.makeDirectories(staging)
        let tree = try ArchiveUnpacker(limits: .init(), archiveName: "published").unpack(
            archivePath: scratch.path("repo") + "/" + report.archive.url, into: staging)
        #expect(Set(tree.files.keys) == ["index.html", PackagePath(Self.precomposed), PackagePath(Self.decomposed)])
        #expect(TreeHash.compute(tree.files) == report.tree)
    }

    @Test func refusesASiteNameThatIsNotUTF8NamingItsBytes() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-latin1")
        let site = scratch.path("site")
        try writeSite(["index.html": Array("home".utf8)], to: site)
        let name = Array("caf".utf8) + [0xe9] + Array(".txt".utf8)
        let fd = FileSystem.withCPath(Array((site + "/").utf8) + name) { open($0, O_WRONLY | O_CREAT, 0o644) }
        #expect(fd >= 0)
        close(fd)
        #expect {
            try Publisher(repository: URL(fileURLWithPath: scratch.path("repo"))).publish(DemoSite.request(site: site, version: 1))
        } throws: { error in
            "\(error)" == #"publish refused: \#(site)/caf\xe9.txt: a device would refuse this path (name is not valid UTF-8)"#
        }
        // The name is bytes to the file system helpers too: listed as it is, and removed with its folder.
        #expect(FileSystem.entryNames(of: site).contains(name))
        #expect(!FileSystem.contents(of: site).contains { $0.unicodeScalars.contains("\u{FFFD}") })
        try FileSystem.removeTree(site)
        #expect(!FileSystem.exists(site))
    }

    /// `-` and `-x` are ordinary names: the pipeline of docs/protocol.md#the-tree-hash gives `sha256sum` `./-`, never `-`
    /// (standard input), and the hash is that of the listing built here by hand.
    @Test func filesNamedWithALeadingDashHashLikeAnyOther() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-dash")
        let site = scratch.path("site")
        let files = ["-": "stdin?", "-x": "option?", "index.html": "home", "d/-": "nested"]
        try writeSite(files.mapValues { Array($0.utf8) }, to: site)
        let listing = files.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            .map { "\(SHA256.hash(Array(files[$0]!.utf8)).hex)  \($0)\n" }.joined()
        let expected = SHA256.hash(Array(listing.utf8)).hex
        #expect(try treeHash(of: site) == expected)
        let report = try Publisher(repository: URL(fileURLWithPath: scratch.path("repo"))).publish(
            DemoSite.request(site: site, version: 1))
        #expect(report.tree == expected)
        #expect(report.files == 4)
    }
}
