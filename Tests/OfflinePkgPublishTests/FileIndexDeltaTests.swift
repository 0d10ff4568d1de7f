import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// `publish` writes file-index deltas next to each chunked archive's index, from the trees of the
/// versions before it; a device holding one of those trees fetches the delta, not the index.
@Suite struct FileIndexDeltaTests {
    @Test func publishWritesDeltasFromEarlierTreesThatGiveTheNewTree() throws {
        let scratch = try TemporaryDirectory(prefix: "index-deltas")
        let site = scratch.path("site")
        let repo = scratch.path("repo")
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        var reports = [PublishReport]()
        for version in 1...3 {
            try writeSite(DemoSite.files(version: version), to: site)
            reports.append(try publisher.publish(DemoSite.request(site: site, version: version)))
        }
        let index = try #require(reports[2].fileIndex)
        let layout = RepositoryLayout(root: repo)
        for old in reports.prefix(2) {
            let url = layout.fileIndexDeltaURL(fromTree: old.tree, index: index.sha256)
            let path = repo + "/" + url
            #expect(FileSystem.exists(path), "\(url)")
            // Stock zstd reads it; the device's reader decodes it.
            let json = try [UInt8](Data(try shell("zstd -dc '\(path)'").utf8))
            let delta = try FileIndexDelta.decode(json: json, archiveSize: reports[2].archive.size, source: url)
            #expect(delta.from == old.tree && delta.index == index.sha256)
            let oldFiles = try TreeIndexFile.decode(FileSystem.read(layout.treeIndex(id: "app", version: old.version)), path: url)
            let newFiles = try TreeIndexFile.decode(FileSystem.read(layout.treeIndex(id: "app", version: "3.0")), path: url)
            let tree = try delta.apply(to: oldFiles, source: url)
            var files = [PackagePath: TreeFile]()
            for entry in tree { files[entry.path] = TreeFile(sha256: entry.sha256, size: entry.size) }
            #expect(TreeHash.compute(files) == reports[2].tree)
            // Only what changed: new or changed paths carry their ranges, deleted paths are named.
            #expect(Set(delta.files.map(\.path)) == Set(newFiles.keys.filter { oldFiles[$0] != newFiles[$0] }))
            #expect(Set(delta.delete) == Set(oldFiles.keys.filter { newFiles[$0] == nil }))
            #expect(FileSystem.fileSize(path)! < index.size)
            // The newest delta from that tree, which devices ask for beside the manifest: the same bytes.
            let newest = repo + "/" + FileIndexDelta.newestURL(nextTo: index.url, fromTree: old.tree)
            #expect(try FileSystem.read(newest) == FileSystem.read(path))
        }
        // The same site again writes nothing new, and two publishes give the same bytes.
        let before = try shell("cd '\(repo)/files/deltas' && sha256sum * | sort")
        _ = try publisher.publish(DemoSite.request(site: site, version: 3))
        #expect(try shell("cd '\(repo)/files/deltas' && sha256sum * | sort") == before)
    }

    @Test func aDeviceTwoVersionsBehindFetchesTheDeltaNotTheIndex() async throws {
        let scratch = try TemporaryDirectory(prefix: "index-delta-sync")
        chmod(scratch.path, 0o755)
        let site = scratch.path("site")
        let repo = scratch.path("repo")
        let root = scratch.path("root")
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        try writeSite(DemoSite.files(version: 1), to: site)
        _ = try publisher.publish(DemoSite.request(site: site, version: 1))
        let nginx = try NginxServer(documentRoot: repo)
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
        let updater = Updater(store: store, manifestURL: nginx.url("manifest.json"), options: .init(retry: .init(attempts: 1)))
        #expect(try await updater.sync().changes.first?.via == .archive)
        for version in 2...3 { _ = try Self.publishByFiles(publisher, site: site, version: version) }
        try await Self.expectSyncByTheIndexDelta(updater, nginx: nginx, repo: repo, root: root)
    }

    /// A device behind asks for the newest delta from its tree beside the manifest, not after it: on an
    /// origin it knows speaks HTTP/2, the server holds the manifest's answer back, and the delta is
    /// asked and answered before it is sent. The full-named delta and the index are never asked.
    @Test func aDeviceOneReleaseBehindAsksForTheNewestDeltaBesideTheManifest() async throws {
        let device = try await Self.deviceOnTheFirstRelease("index-delta-early")
        let (scratch, server, updater) = (device.scratch, device.server, device.updater)
        let hold = 2.0
        let first = try Self.published(scratch.path("repo"))
        let report = try Self.publishByFiles(device.publisher, site: device.site, version: 2)
        let index = try #require(report.fileIndex)
        let newest = "/" + FileIndexDelta.newestURL(nextTo: index.url, fromTree: first.tree)
        // Held until the early request was answered (or 20 s): its order, not a busy machine's timing.
        server.script("/manifest.json", [.holdHeadUntil(count: 1, prefix: newest, seconds: hold)])
        let before = server.requests.count
        let sync = try await updater.sync()
        #expect(sync.changes.first?.via == .files)
        let requests = server.requests.dropFirst(before)
        let manifest = try #require(requests.first { $0.path == "/manifest.json" })
        let early = try #require(requests.first { $0.path == newest }, "\(requests.map(\.path))")
        #expect(early.status == 200)
        #expect(early.answeredAt < manifest.answeredAt, "the delta was asked after the manifest came")
        let named = "/" + RepositoryLayout(root: scratch.path("repo")).fileIndexDeltaURL(fromTree: first.tree, index: index.sha256)
        #expect(!requests.contains { $0.path == named || $0.path == "/" + index.url }, "\(requests.map(\.path))")
    }

    /// On an origin that answered over HTTP/1.1, nothing is asked early however slow the manifest: the
    /// request would open a second connection (a TLS handshake over https) for what the manifest's
    /// answer may make useless. The delta is asked after the manifest, by its name.
    @Test func anHTTP1OriginGetsNoEarlyRequest() async throws {
        let device = try await Self.deviceOnTheFirstRelease("index-delta-http1", overHTTP2: false)
        let first = try Self.published(device.scratch.path("repo"))
        let report = try Self.publishByFiles(device.publisher, site: device.site, version: 2)
        let index = try #require(report.fileIndex)
        device.server.script("/manifest.json", [.holdHead(seconds: 1)])
        let before = device.server.requests.count
        #expect(try await device.updater.sync().changes.first?.via == .files)
        let requests = device.server.requests.dropFirst(before)
        let newest = "/" + FileIndexDelta.newestURL(nextTo: index.url, fromTree: first.tree)
        #expect(requests.first?.path == "/manifest.json", "\(requests.map(\.path))")
        #expect(!requests.contains { $0.path == newest }, "\(requests.map(\.path))")
    }

    /// The newest delta fetched beside the manifest is a guess: a stale copy (it stands for an older
    /// index) or a damaged one is dropped, and the delta is fetched by its full name in the same sync.
    @Test(arguments: ["stale", "damaged"])
    func aStaleOrDamagedNewestDeltaFallsBackToTheNamedOneInTheSameSync(_ kind: String) async throws {
        let device = try await Self.deviceOnTheFirstRelease("index-delta-stale-\(kind)")
        let (scratch, site, publisher, server, updater) = (device.scratch, device.site, device.publisher, device.server, device.updater)
        let repo = scratch.path("repo")
        let first = try Self.published(repo)
        var reports = [PublishReport]()
        for version in 2...3 {
            reports.append(try Self.publishByFiles(publisher, site: site, version: version))
            if version == 2 && kind == "stale" {
                let index = try #require(reports[0].fileIndex)
                let newest = repo + "/" + FileIndexDelta.newestURL(nextTo: index.url, fromTree: first.tree)
                try FileManager.default.copyItem(atPath: newest, toPath: scratch.path("stale-newest"))
            }
        }
        let index = try #require(reports[1].fileIndex)
        let newest = "/" + FileIndexDelta.newestURL(nextTo: index.url, fromTree: first.tree)
        // What an edge that kept release 2's copy, or a damaged one, serves under the newest name.
        let bytes = kind == "stale" ? try FileSystem.read(scratch.path("stale-newest")) : [UInt8](repeating: 7, count: 300)
        try FileSystem.writeAtomically(bytes, to: repo + newest)
        server.script("/manifest.json", [.holdHeadUntil(count: 1, prefix: newest, seconds: 0.5)])
        let before = server.requests.count
        let sync = try await updater.sync()
        let change = try #require(sync.changes.first)
        #expect(change.via == .files && change.to == "3.0")
        let requests = server.requests.dropFirst(before)
        let named = "/" + RepositoryLayout(root: repo).fileIndexDeltaURL(fromTree: first.tree, index: index.sha256)
        #expect(requests.contains { $0.path == newest && $0.status == 200 }, "\(requests.map(\.path))")
        #expect(requests.contains { $0.path == named && $0.status == 200 }, "\(requests.map(\.path))")
        #expect(!requests.contains { $0.path == "/" + index.url }, "\(requests.map(\.path))")
        let entry = try #require(try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "m").packages.first)
        #expect(try treeHash(of: installedTree(root: scratch.path("root"), id: "app", version: "3.0", tree: entry.tree)) == entry.tree)
    }

    /// A device on release 1 of the demo site, and what serves it: a `FaultServer` holding the
    /// repository (its log sees every request, its script holds answers back), behind nginx speaking
    /// HTTP/2 over TLS with a test CA's certificate, as a device's origin does where early requests are
    /// made (`overHTTP2` false: the `FaultServer` alone, HTTP/1.1 in the clear). The device synced
    /// release 1 (by the archive) and so remembers which protocol the origin speaks.
    struct Device {
        var scratch: TemporaryDirectory
        var site: String
        var publisher: Publisher
        var server: FaultServer
        var front: NginxServer?
        /// Kept while the device trusts its certificate file.
        var authority: TestCertificateAuthority?
        var updater: Updater
    }

    static func deviceOnTheFirstRelease(_ prefix: String, overHTTP2: Bool = true) async throws -> Device {
        let scratch = try TemporaryDirectory(prefix: prefix)
        chmod(scratch.path, 0o755)
        let site = scratch.path("site")
        let publisher = Publisher(repository: URL(fileURLWithPath: scratch.path("repo")))
        try writeSite(DemoSite.files(version: 1), to: site)
        _ = try publisher.publish(DemoSite.request(site: site, version: 1))
        let server = try FaultServer(documentRoot: scratch.path("repo"))
        let authority = overHTTP2 ? try TestCertificateAuthority() : nil
        let front = try authority.map {
            try NginxServer(
                documentRoot: scratch.path("repo"),
                locations: "location / { proxy_pass \(server.baseURL.absoluteString.dropLast()); proxy_buffering off; }",
                authority: $0, http2: true)
        }
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        var options = Updater.Options(retry: .init(attempts: 1))
        options.caBundle = authority?.certificatePath
        let updater = Updater(store: store, manifestURL: (front?.url ?? server.url)("manifest.json"), options: options)
        #expect(try await updater.sync().changes.first?.via == .archive)
        return Device(
            scratch: scratch, site: site, publisher: publisher, server: server, front: front, authority: authority, updater: updater)
    }

    /// Publishes the demo site's `version` with no package deltas: a device goes by files.
    static func publishByFiles(_ publisher: Publisher, site: String, version: Int) throws -> PublishReport {
        try writeSite(DemoSite.files(version: version), to: site)
        var request = DemoSite.request(site: site, version: version)
        request.deltaCount = 0
        return try publisher.publish(request)
    }

    /// The package entry `repo`'s manifest lists now.
    static func published(_ repo: String) throws -> PackageEntry {
        try #require(try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "manifest").packages.first)
    }

    /// Syncs `updater` to `repo`'s 3.0 and expects it to come by files with the index delta from
    /// nginx, never the full index.
    static func expectSyncByTheIndexDelta(_ updater: Updater, nginx: NginxServer, repo: String, root: String) async throws {
        // nginx's validators have one-second resolution.
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(5)], ofItemAtPath: repo + "/manifest.json")
        let before = nginx.accessLog().count
        let report = try await updater.sync()
        let change = try #require(report.changes.first)
        let manifest = try Manifest(parsing: FileSystem.read(repo + "/manifest.json"), source: "manifest")
        let entry = try #require(manifest.packages.first)
        let reference = try #require(entry.archive.files)
        usleep(200_000)
        let requests = nginx.accessLog().dropFirst(before)
        #expect(change.via == .files)
        #expect(requests.contains { $0.uri.hasPrefix("/files/deltas/") && $0.status == 200 }, "\(Array(requests))")
        #expect(!requests.contains { $0.uri == "/" + reference.url }, "\(Array(requests))")
        #expect(try treeHash(of: installedTree(root: root, id: "app", version: "3.0", tree: entry.tree)) == entry.tree)
    }

    /// A release promoted to another channel brings the index deltas from the trees that channel
    /// published, so its devices update by the delta there too; deltas from versions the channel never
    /// had stay behind.
    @Test func aDeviceOnAPromotedChannelOneReleaseBehindFetchesTheDelta() async throws {
        let scratch = try TemporaryDirectory(prefix: "index-delta-promote")
        chmod(scratch.path, 0o755)
        let site = scratch.path("site")
        let staging = scratch.path("staging")
        let production = scratch.path("production")
        let root = scratch.path("root")
        let publisher = Publisher(repository: URL(fileURLWithPath: staging))
        var reports = [PublishReport]()
        for version in 1...3 { reports.append(try Self.publishByFiles(publisher, site: site, version: version)) }
        let channel = Publisher(repository: URL(fileURLWithPath: production))
        _ = try channel.promote(id: "app", version: "1.0", from: URL(fileURLWithPath: staging))
        let nginx = try NginxServer(documentRoot: production)
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
        let updater = Updater(store: store, manifestURL: nginx.url("manifest.json"), options: .init(retry: .init(attempts: 1)))
        #expect(try await updater.sync().changes.first?.via == .archive)

        _ = try channel.promote(id: "app", version: "3.0", from: URL(fileURLWithPath: staging))
        let index = try #require(reports[2].fileIndex)
        let layout = RepositoryLayout(root: production)
        #expect(FileSystem.exists(layout.path(ofURL: layout.fileIndexDeltaURL(fromTree: reports[0].tree, index: index.sha256))))
        // Staging's delta from 2.0, a tree no device of this channel holds, is not carried.
        #expect(!FileSystem.exists(layout.path(ofURL: layout.fileIndexDeltaURL(fromTree: reports[1].tree, index: index.sha256))))
        // And the newest delta from release 1's tree, under its name on this channel.
        #expect(FileSystem.exists(layout.path(ofURL: FileIndexDelta.newestURL(nextTo: index.url, fromTree: reports[0].tree))))
        try await Self.expectSyncByTheIndexDelta(updater, nginx: nginx, repo: production, root: root)
    }
}
