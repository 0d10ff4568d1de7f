import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// Link fields on entries whose type says "regular", built by editing headers as an attacker would, and
/// the writer's own defence: nothing outside staging may change (a watched folder beside it keeps its
/// names, modes and contents), and no link ever lands in staging.
@Suite("Archive links")
struct ArchiveLinkTests {
    /// A watched folder outside staging, with a file of mode 0600 an escaping chmod or write would change.
    struct Scene {
        let dir: TemporaryDirectory
        let watched: String
        let staging: String
        let before: FolderSnapshot

        init() throws {
            dir = try TemporaryDirectory()
            watched = try dir.makeDirectory("watched")
            _ = try dir.write("secret\n", to: "watched/secret")
            chmod(dir.path("watched/secret"), 0o600)
            _ = try dir.makeDirectory("watched/sub")
            // The layout of a sync (root/staging/<name>) and of scripts/corpus: a relative link from an
            // entry at the top of staging reaches `watched` through `relativeWatched` in both.
            staging = try dir.makeDirectory("roots/r/staging/unpack")
            before = try FolderSnapshot(watched)
        }

        /// Checks that the watched folder is as it was and that staging holds only folders and 0400 files.
        func checkNothingEscaped(_ comment: Comment) throws {
            #expect(try FolderSnapshot(watched) == before, comment)
            for item in try FolderSnapshot(staging).items.values {
                let type = item.mode & UInt32(S_IFMT)
                #expect(type == UInt32(S_IFDIR) || (type == UInt32(S_IFREG) && item.mode & 0o7777 == 0o400), comment)
            }
        }
    }

    static let relativeWatched = "../../../../watched"

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var reason: String
        var build: @Sendable (_ watched: String) -> [UInt8]
        var testDescription: String { name }
    }

    static let tarCases: [Case] = [
        Case(name: "hard link typed '1' to a file outside", reason: "hard link") { watched in
            var tar = TarBuilder()
            tar.entry("h", type: "1", linkname: watched + "/secret")
            tar.entry("h", data: Array("overwritten\n".utf8))
            return tar.finished()
        },
        Case(name: "symlink typed '2' then a file below it", reason: "symbolic link") { watched in
            var tar = TarBuilder()
            tar.entry("l", type: "2", linkname: relativeWatched)
            tar.entry("l/new", data: Array("x".utf8))
            return tar.finished()
        },
        // libarchive 3.6 leaves this one without a file type: refused as such, before any link is read.
        Case(name: "hard link typed '1' with its target and path in pax", reason: "unsupported entry type") { watched in
            var tar = TarBuilder()
            tar.pax([("linkpath", watched + "/secret"), ("path", "evil")])
            tar.entry("ignored", type: "1", mode: 0o444)
            return tar.finished()
        },
    ]

    @Test(arguments: tarCases, ["tar", "tar.gz", "tar.zst"])
    func refusesLinkFieldsWhateverTheTypeSays(_ hostile: Case, format: String) throws {
        let scene = try Scene()
        let archive = try Self.compress(hostile.build(scene.watched), format: format, in: scene.dir)
        HostileCorpus.keep(archive, as: "link-\(hostile.name).\(format)")
        #expect {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: archive, into: scene.staging)
        } throws: { error in
            guard case .archiveRefused(_, _, let reason) = error as? OfflinePkgError else { return false }
            return reason.contains(hostile.reason)
        }
        try scene.checkNothingEscaped("\(hostile.name) \(format)")
    }

    /// An entry typed '0' that carries a link name (ustar `linkname` or pax `linkpath`) is a regular file
    /// to libarchive's tar reader: the link name is ignored, the file lands as a plain 0444 file, and
    /// nothing outside is touched.
    @Test(arguments: ["ustar linkname", "pax linkpath"], ["tar", "tar.gz"])
    func aRegularEntryWithALinkNameIsAPlainFile(field: String, format: String) throws {
        let scene = try Scene()
        var tar = TarBuilder()
        if field == "pax linkpath" { tar.pax([("linkpath", scene.watched + "/secret")]) }
        tar.entry("evil", data: Array("x\n".utf8), linkname: field == "pax linkpath" ? "" : scene.watched + "/secret", mode: 0o444)
        let archive = try Self.compress(tar.finished(), format: format, in: scene.dir)
        HostileCorpus.keep(archive, as: "link-typeflag0-\(field).\(format)")
        let tree = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: archive, into: scene.staging)
        #expect(Array(tree.files.keys) == ["evil"])
        #expect(try FileSystem.read(scene.staging + "/evil") == Array("x\n".utf8))
        try scene.checkNothingEscaped("typeflag 0 with a link name")
    }

    /// A zip entry whose external attributes say "symbolic link" (its data is the target).
    @Test func refusesAZipEntryWhoseAttributesSaySymlink() throws {
        let scene = try Scene()
        _ = try scene.dir.write(scene.watched + "/secret", to: "site/evil")
        let zip = scene.dir.path("a.zip")
        try run("bsdtar", ["--format", "zip", "-cf", zip, "-C", scene.dir.path("site"), "evil"]).checked()
        var bytes = try FileSystem.read(zip)
        ZipSurgery.setUnixMode(0o120777, in: &bytes)
        _ = try scene.dir.write(bytes, to: "a.zip")
        HostileCorpus.keep(zip, as: "link-zip-symlink-attributes.zip")
        #expect {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: zip, into: scene.staging)
        } throws: { error in
            guard case .archiveRefused(_, _, let reason) = error as? OfflinePkgError else { return false }
            return reason.contains("symbolic link")
        }
        try scene.checkNothingEscaped("zip symlink attributes")
    }

    /// The formats that carried links past a per-entry check alone: an mtree
    /// `type=file link=`, a xar. They are refused as formats now, before any entry.
    @Test func refusesTheFormatsThatSmuggledLinksAsFiles() throws {
        let scene = try Scene()
        _ = try scene.dir.write("#mtree\n./evil type=file mode=0444 link=\(Self.relativeWatched)/secret\n", to: "a.mtree")
        HostileCorpus.keep(scene.dir.path("a.mtree"), as: "link-mtree-type-file.mtree")
        #expect {
            _ = try ArchiveUnpacker(limits: .init(), archiveName: "a").unpack(archivePath: scene.dir.path("a.mtree"), into: scene.staging)
        } throws: { error in
            guard case .archiveRefused(_, nil, let reason) = error as? OfflinePkgError else { return false }
            return reason.contains("not a tar or zip archive")
        }
        try scene.checkNothingEscaped("mtree")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scene.staging) == [])
    }

    static func compress(_ tar: [UInt8], format: String, in dir: TemporaryDirectory) throws -> String {
        let plain = try dir.write(tar, to: "hostile-\(UUID().uuidString).tar")
        switch format {
        case "tar": return plain
        case "tar.gz":
            try run("bash", ["-c", "gzip -c < \"$1\" > \"$1.gz\"", "bash", plain]).checked()
            return plain + ".gz"
        default:
            try run("zstd", ["-q", plain, "-o", plain + ".zst"]).checked()
            return plain + ".zst"
        }
    }

    /// The writer's own line of defence, as if a check had let a link in: staging already holds a link
    /// to the watched folder and one to the secret. A full archive fails on them (O_EXCL, O_NOFOLLOW);
    /// a delta replaces the file link with a new inode and refuses to descend through the folder link.
    @Test(arguments: HostileArchiveTests.formats, [false, true])
    func theWriterNeverFollowsALinkInStaging(format: String, isDelta: Bool) throws {
        let scene = try Scene()
        var files = [SiteFile("g.txt", "new\n")]
        if isDelta { files.append(SiteFile(ArchivePath.deltaControlName, #"{"from":"1","to":"2","delete":[]}"#)) }
        try writeSite(files, to: scene.dir.path("site-file"))
        try writeSite([SiteFile("a/f.txt", "new\n")], to: scene.dir.path("site-folder"))
        #expect(symlink(scene.watched + "/secret", scene.staging + "/g.txt") == 0)
        #expect(symlink(scene.watched, scene.staging + "/a") == 0)
        for site in ["site-file", "site-folder"] {
            let archive = scene.dir.path("\(site).\(format)")
            try run(
                "bsdtar", HostileArchiveTests.createFlags(format, keepAbsolutePaths: false) + [archive, "-C", scene.dir.path(site), "."]
            ).checked()
            let unpacker = ArchiveUnpacker(limits: .init(), archiveName: "a", isDelta: isDelta)
            let outcome = Result { try unpacker.unpack(archivePath: archive, into: scene.staging) }
            switch (site, isDelta, outcome) {
            case ("site-file", true, .success(let tree)):
                #expect(tree.files["g.txt"]?.size == 4)
                #expect(try FileSystem.read(scene.staging + "/g.txt") == Array("new\n".utf8))
            case (_, _, .success): Issue.record("\(site) \(format) delta \(isDelta): unpacked through a link")
            case (_, _, .failure): break
            }
        }
        #expect(try FolderSnapshot(scene.watched) == scene.before)
    }

    /// A delta unpacks over hard links to the installed tree: the changed file gets a new inode (unlink,
    /// then create), so the installed file, here the watched secret, keeps its bytes and mode.
    @Test(arguments: HostileArchiveTests.formats)
    func aDeltaNeverWritesThroughAHardLinkToTheOldTree(format: String) throws {
        let scene = try Scene()
        #expect(link(scene.watched + "/secret", scene.staging + "/g.txt") == 0)
        try writeSite(
            [SiteFile("g.txt", "changed\n"), SiteFile(ArchivePath.deltaControlName, #"{"from":"1","to":"2","delete":[]}"#)],
            to: scene.dir.path("site"))
        let archive = scene.dir.path("delta.\(format)")
        try run("bsdtar", HostileArchiveTests.createFlags(format, keepAbsolutePaths: false) + [archive, "-C", scene.dir.path("site"), "."])
            .checked()
        let tree = try ArchiveUnpacker(limits: .init(), archiveName: "d", isDelta: true).unpack(archivePath: archive, into: scene.staging)
        #expect(tree.files["g.txt"]?.size == 8)
        #expect(try FileSystem.read(scene.staging + "/g.txt") == Array("changed\n".utf8))
        var old = stat()
        var new = stat()
        #expect(lstat(scene.watched + "/secret", &old) == 0 && lstat(scene.staging + "/g.txt", &new) == 0)
        #expect(old.st_ino != new.st_ino && old.st_nlink == 1 && new.st_mode & 0o7777 == 0o400)
        #expect(try FolderSnapshot(scene.watched) == scene.before)
    }
}
