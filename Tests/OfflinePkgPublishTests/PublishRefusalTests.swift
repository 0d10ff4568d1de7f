import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// What `publish` refuses because devices would refuse it, checked with the devices' own code, and the
/// order in which it compares versions.
@Suite struct PublishRefusalTests {
    /// A release is checked against the unpack limits devices apply: a fleet whose devices take at most
    /// three entries would refuse this site's archive, so it is not published.
    @Test func aReleaseDevicesWouldRefuseIsNotPublished() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refusal")
        try writeSite(
            [SiteFile("index.html", "i"), SiteFile("a.js", "a"), SiteFile("css/b.css", "b")], to: scratch.path("site"))
        let publisher = Publisher(repository: URL(fileURLWithPath: scratch.path("repo")))
        var request = PublishRequest(site: scratch.path("site"), id: "app", version: "1", routes: ["https://m.example.com/"])
        request.deviceLimits = UnpackLimits(maxEntries: 3)
        #expect {
            try publisher.publish(request)
        } throws: { error in
            "\(error)".contains("devices would refuse this release: archive archives/app/1/app-1.tar.zst refused")
                && "\(error)".contains("more than 3 entries")
        }
        #expect(!FileSystem.exists(scratch.path("repo/manifest.json")))
        #expect(!FileSystem.exists(scratch.path("repo/archives/app")))
        request.deviceLimits = UnpackLimits(maxEntries: 4)
        #expect(try publisher.publish(request).sequence == 1)
    }

    /// The check runs the device's unpacker: what it refuses in an archive (here a symbolic link, which
    /// no site scan lets in) is what the check refuses, with the device's reason.
    @Test func theDeviceCheckRefusesWhatTheUnpackerRefuses() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refusal")
        var tar = TarBuilder()
        tar.entry("index.html", data: Array("x".utf8))
        tar.entry("link", type: "2", linkname: "index.html")
        let archive = try scratch.write(tar.finished(), to: "hostile.tar")
        let publisher = Publisher(repository: URL(fileURLWithPath: scratch.path("repo")))
        try FileSystem.makeDirectories(publisher.layout.scratch)
        #expect {
            try publisher.checkAsDevice(
                archive: archive, url: "archives/app/1/app-1.tar", tree: String(repeating: "0", count: 64), archiveSize: 0,
                fileIndex: nil)
        } throws: { error in
            "\(error)"
                == "publish refused: devices would refuse this release: archive archives/app/1/app-1.tar refused: entry \"link\": symbolic link"
        }
        // An archive that unpacks, to another tree than the one the manifest would carry.
        var plain = TarBuilder()
        plain.entry("index.html", data: Array("x".utf8))
        let other = try scratch.write(plain.finished(), to: "plain.tar")
        #expect {
            try publisher.checkAsDevice(
                archive: other, url: "a.tar", tree: String(repeating: "0", count: 64), archiveSize: 0, fileIndex: nil)
        } throws: { error in
            "\(error)".contains("a.tar unpacks to tree") && "\(error)".contains("not the site's 0000")
        }
        #expect(FileSystem.contents(of: publisher.layout.scratch).isEmpty, "the check left its unpacked tree behind")
    }

    /// Archives devices refuse for a fault found in the archive as a whole (a path listed twice, a path
    /// through a file, a folder and a file of one name, more bytes than the limits allow): the check,
    /// which writes no file, refuses each with the very error a device's unpack gives.
    @Test(arguments: ["duplicate path", "path through a file", "file over a folder", "over the byte limit"])
    func theDeviceCheckRefusesWithTheDevicesReason(_ fault: String) throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refusal")
        var tar = TarBuilder()
        var limits = UnpackLimits()
        switch fault {
        case "duplicate path":
            tar.entry("index.html", data: Array("x".utf8))
            tar.entry("index.html", data: Array("y".utf8))
        case "path through a file":
            tar.entry("js", data: Array("x".utf8))
            tar.entry("js/app.js", data: Array("y".utf8))
        case "file over a folder":
            tar.entry("css/", type: "5")
            tar.entry("css", data: Array("x".utf8))
        default:
            tar.entry("index.html", data: [UInt8](repeating: 0x61, count: 4096))
            limits.maxBytes = 4095
        }
        let archive = try scratch.write(tar.finished(), to: "hostile.tar")
        let url = "archives/app/1/app-1.tar"
        let deviceError = Result {
            try ArchiveUnpacker(limits: limits, archiveName: url).unpack(
                archivePath: archive, into: try scratch.makeDirectory("device"))
        }
        guard case .failure(let refusal) = deviceError else {
            Issue.record("a device unpacked \(fault)")
            return
        }
        let publisher = Publisher(repository: URL(fileURLWithPath: scratch.path("repo")))
        #expect {
            try publisher.checkAsDevice(
                archive: archive, url: url, tree: String(repeating: "0", count: 64), archiveSize: 0, fileIndex: nil,
                limits: limits)
        } throws: { error in
            "\(error)" == "publish refused: devices would refuse this release: \(refusal)"
        }
    }

    /// The check verifies the archive and its file index without writing the tree out: not a file, not a
    /// folder is created anywhere in the repository while it runs, so a publish creates its files once.
    @Test func theDeviceCheckCreatesNothing() throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-refusal")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site"))
        let publisher = Publisher(repository: URL(fileURLWithPath: scratch.path("repo")))
        let report = try publisher.publish(DemoSite.request(site: scratch.path("site"), version: 1))
        let index = try #require(report.fileIndex)
        try FileSystem.makeDirectories(publisher.layout.scratch)
        let watch = try CreationWatch(below: scratch.path("repo"))
        try publisher.checkAsDevice(
            archive: scratch.path("repo/" + report.archive.url), url: report.archive.url, tree: report.tree,
            archiveSize: report.archive.size,
            fileIndex: (
                scratch.path("repo/" + index.url), FileIndexReference(url: index.url, sha256: index.sha256, size: index.size)
            ))
        #expect(try watch.created() == [])
    }

    @Test func versionsOrderAsDottedNumbersThenPreReleases() {
        let ordered = [
            "0.9", "1.2.99", "1.3.0-alpha", "1.3.0-alpha.1", "1.3.0-alpha.beta", "1.3.0-beta.2", "1.3.0-beta.11",
            "1.3.0-rc.1", "1.3", "1.10.0", "2024.5.1",
        ]
        let versions = ordered.compactMap(ReleaseVersion.init)
        #expect(versions.count == ordered.count)
        for (lower, higher) in zip(versions, versions.dropFirst()) { #expect(lower < higher, "\(lower) < \(higher)") }
        #expect(ReleaseVersion("1.3")! == ReleaseVersion("1.3.0")!)
        #expect(ReleaseVersion("1.3.0+build.7")! == ReleaseVersion("1.3.0")!)
        for unordered in ["v1.2", "g3f2a91c", "release-7", "1..2", "1.2-", "", "1.2.x"] {
            #expect(ReleaseVersion(unordered) == nil, "\(unordered)")
        }
    }

    /// `maxShellVersion` and `disabled` are read as devices read them, and refused when malformed.
    @Test func theManifestCarriesMaxShellVersionAndDisabled() throws {
        func manifest(_ extra: String) -> [UInt8] {
            let hex = String(repeating: "a", count: 64)
            return Array(
                """
                {"format": 1, "sequence": 1, "packages": [{"id": "app", "version": "1", "routes": ["https://m.example.com/"],
                 "archive": {"url": "a.tar", "sha256": "\(hex)", "size": 1}, "tree": "\(hex)"\(extra)}]}
                """.utf8)
        }
        let parsed = try Manifest(parsing: manifest(#", "maxShellVersion": "3.2", "disabled": true"#), source: "m").packages[0]
        #expect(parsed.maxShellVersion == "3.2" && parsed.disabled)
        #expect(try Manifest(parsing: manifest(""), source: "m").packages[0].disabled == false)
        #expect(throws: OfflinePkgError.self) { try Manifest(parsing: manifest(#", "maxShellVersion": "3.x""#), source: "m") }
        #expect(throws: OfflinePkgError.self) { try Manifest(parsing: manifest(#", "disabled": "yes""#), source: "m") }
    }

    @Test func anUpperShellBoundCountsOnlyTheComponentsItHas() {
        let bound = ShellVersion("3.2")!
        for within in ["3.2", "3.2.0", "3.2.7", "3.1.9", "3", "2.99"] {
            #expect(ShellVersion(within)!.isWithin(bound), "\(within)")
        }
        for beyond in ["3.3", "3.10", "4"] { #expect(!ShellVersion(beyond)!.isWithin(bound), "\(beyond)") }
        #expect(ShellVersion("3.2.7")!.isWithin(ShellVersion("3.2.7")!))
        #expect(!ShellVersion("3.2.8")!.isWithin(ShellVersion("3.2.7")!))
    }
}

/// Names created in a folder tree since the watch began (inotify's `IN_CREATE` on every folder in it).
private final class CreationWatch {
    private let descriptor: Int32
    private var folders: [Int32: String] = [:]

    init(below root: String) throws {
        descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { throw Errno.current }
        let walker = FileManager.default.enumerator(atPath: root)
        for folder in [""] + (walker?.allObjects as? [String] ?? []) {
            var isFolder: ObjCBool = false
            let path = folder.isEmpty ? root : root + "/" + folder
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue else { continue }
            let watch = inotify_add_watch(descriptor, path, UInt32(IN_CREATE))
            guard watch >= 0 else { throw Errno.current }
            folders[watch] = folder
        }
    }

    deinit { close(descriptor) }

    /// The paths created (relative to the root), in order.
    func created() throws -> [String] {
        var names = [String]()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EAGAIN { return names }
            guard count > 0 else { throw Errno.current }
            var offset = 0
            while offset < count {
                let (watch, length) = buffer.withUnsafeBytes { bytes in
                    let event = bytes.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    return (event.wd, Int(event.len))
                }
                let start = offset + MemoryLayout<inotify_event>.size
                let name = String(decoding: buffer[start..<start + length].prefix { $0 != 0 }, as: UTF8.self)
                names.append([folders[watch] ?? "?", name].filter { !$0.isEmpty }.joined(separator: "/"))
                offset = start + length
            }
        }
    }
}
