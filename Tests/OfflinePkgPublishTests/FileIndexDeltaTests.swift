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
        for version in 2...3 {
            try writeSite(DemoSite.files(version: version), to: site)
            // No package deltas: the device goes by files.
            var request = DemoSite.request(site: site, version: version)
            request.deltaCount = 0
            _ = try publisher.publish(request)
        }
        try await Self.expectSyncByTheIndexDelta(updater, nginx: nginx, repo: repo, root: root)
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
        for version in 1...3 {
            try writeSite(DemoSite.files(version: version), to: site)
            // No package deltas: the device goes by files.
            var request = DemoSite.request(site: site, version: version)
            request.deltaCount = 0
            reports.append(try publisher.publish(request))
        }
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
        try await Self.expectSyncByTheIndexDelta(updater, nginx: nginx, repo: production, root: root)
    }
}
