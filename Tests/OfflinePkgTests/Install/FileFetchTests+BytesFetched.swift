import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// A repository the publisher writes (`publish`'s default chunked archives), served by nginx.
struct PublisherRepo {
    let scratch: TemporaryDirectory
    let nginx: NginxServer
    let publisher: Publisher

    init(prefix: String) throws {
        scratch = try TemporaryDirectory(prefix: prefix)
        let repo = scratch.path("repo")
        try FileSystem.makeDirectories(repo)
        // nginx's workers walk into the folder.
        chmod(scratch.path, 0o755)
        nginx = try NginxServer(documentRoot: repo)
        publisher = Publisher(repository: URL(fileURLWithPath: repo))
    }

    /// Publishes `files` as `app` `<version>.0` with deltas from the last 3 versions.
    func publish(_ version: Int, files: [String: [UInt8]]) throws -> PublishReport {
        let site = scratch.path("site-\(version)")
        try writeSite(files, to: site)
        return try publisher.publish(
            PublishRequest(site: site, id: "app", version: "\(version).0", routes: ["https://m.example.com/app/"], deltaCount: 3))
    }
}

/// What a sync reports it fetched, against what nginx sent.
extension FileFetchTests {
    /// The body bytes nginx answered (200 or 206) to the GETs after line `from` of `log`, all but the
    /// manifest's: what a sync's package changes crossed the network for.
    static func packageBytesSent(_ log: [AccessLogEntry], from: Int) -> Int64 {
        log.dropFirst(from).filter { $0.method == "GET" && [200, 206].contains($0.status) && $0.uri != "/manifest.json" }
            .reduce(0) { $0 + Int64($1.bodyBytesSent) }
    }

    /// A file index fetched to weigh the file-level way, which then loses to the delta: its bytes crossed
    /// the network all the same, and the report counts them with the delta's, as nginx sent them. The
    /// repository has no file-index deltas (as one written before them), so the full index is fetched.
    @Test func anIndexFetchedAndNotUsedIsCountedInTheBytesFetched() async throws {
        let published = try PublisherRepo(prefix: "files-unused-index")
        let nginx = published.nginx
        // One large file changes: the index (small) is worth fetching, but the index and the file's frames
        // cost more than the delta, which carries the same file.
        func publish(_ version: Int) throws -> PublishReport {
            var files = Self.files(version: 1)
            files["big.bin"] = content("big of v\(version)", size: 300_000)
            return try published.publish(version, files: files)
        }
        _ = try publish(1)
        let root = try TemporaryDirectory(prefix: "files-device")
        _ = try await Self.sync(root.path, nginx.url("manifest.json"))
        let v2 = try publish(2)
        try FileManager.default.removeItem(atPath: published.scratch.path("repo/files/deltas"))
        let (index, delta) = (try #require(v2.fileIndex), try #require(v2.deltas.first))
        #expect(index.size < delta.file.size)
        let before = nginx.accessLog().count
        let report = try await Self.sync(root.path, nginx.url("manifest.json"))
        #expect(report.changes.first?.via == .delta)
        let log = nginx.waitForRequests(before + 3)
        let indexSent = Self.bytesSent(log, from: before, path: index.url)
        let deltaSent = Self.bytesSent(log, from: before, path: delta.file.url)
        #expect(
            indexSent.requests == 1 && Int64(indexSent.bytes) == index.size, "the index was not fetched: \(log.dropFirst(before))"
        )
        #expect(report.bytesFetched == Int64(indexSent.bytes + deltaSent.bytes))
        #expect(report.changes.first?.bytes == index.size + delta.file.size)
        #expect(report.bytesFetched == Self.packageBytesSent(log, from: before))
    }
}
