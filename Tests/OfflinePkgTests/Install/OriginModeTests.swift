import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg

/// How a device finds out how an origin takes ranges, remembers it in the root, and finds it out again
/// when the origin changes; and a whole-file answer to several ranges cut off at its head.
@Suite struct OriginModeTests {
    /// A site of `count` incompressible files of 1 MiB: a whole-file answer is large enough to see
    /// where it was cut off. Release `version` changes two files of its own.
    static func bigFiles(version: Int, count: Int = 24) -> [String: [UInt8]] {
        var files = [String: [UInt8]]()
        for index in 0..<count {
            var changedIn = 1
            for release in stride(from: version, to: 1, by: -1) where [release % count, (release * 7) % count].contains(index) {
                changedIn = release
                break
            }
            files["blobs/b\(index).bin"] = content("blob \(index) of v\(changedIn)", size: 1 << 20)
        }
        files["index.html"] = Array("<title>v\(version)</title>\n".utf8)
        return files
    }

    static func support(_ root: TemporaryDirectory, _ rig: OriginRangeTests.Rig, _ built: ChunkedArchiveBuilder.Built)
        -> RangeSupport?
    {
        OriginRanges(layout: CacheLayout(root: root.path)).support(for: rig.served.url(built.archiveURL))
    }

    /// GET requests for the archive of `built`, from log line `before` on.
    static func archiveGets(_ rig: OriginRangeTests.Rig, _ built: ChunkedArchiveBuilder.Built, from before: Int)
        -> [AccessLogEntry]
    {
        usleep(300_000)
        return rig.origin.accessLog().dropFirst(before).filter { $0.uri == "/" + built.archiveURL && $0.method == "GET" }
    }

    /// Over TLS (HTTP/2, one connection) an origin not known yet is not waited for: the frames go one
    /// range a request side by side, which every origin that serves ranges answers alike, while the
    /// HEAD that finds the origin out runs beside them. The HEAD is held until a range is asked (at
    /// most 10 s): a sync that waited for it would ask none before.
    @Test func anUnknownOriginOverTLSIsNotWaitedFor() async throws {
        let rig = try OriginRangeTests.Rig(.http2)
        try rig.origin.reload(locations: "")
        try rig.publish(1, files: Self.bigFiles(version: 1))
        let root = try TemporaryDirectory(prefix: "origin-mode-tls")
        #expect(try await rig.sync(root.path).changes.first?.via == .archive)
        let built = try rig.publish(2, files: Self.bigFiles(version: 2))
        let before = rig.origin.accessLog().count
        let transport = HoldingProbes()
        let store = try PackageStore(root: URL(fileURLWithPath: root.path), options: .init(watchInterval: 0))
        var options = Updater.Options(retry: RetryPolicy(attempts: 1))
        options.caBundle = rig.authority?.certificatePath
        let updater = Updater(store: store, manifestURL: rig.manifestURL, options: options, world: World(transport: transport))
        #expect(try await updater.sync().changes.first?.via == .files)
        #expect(transport.order.withLock { $0 }.first == "range", "\(transport.order.withLock { $0 })")
        let gets = Self.archiveGets(rig, built, from: before)
        #expect(!gets.isEmpty && gets.allSatisfy { $0.status == 206 && !($0.range ?? "").contains(",") }, "\(gets)")
    }

    /// A sync's transport whose HEAD requests wait until a range is asked, or 10 s; `order` says which
    /// came first ("range" or "head").
    final class HoldingProbes: Transport {
        let inner = CurlTransport.sharingConnections()
        let order = Mutex<[String]>([])

        func get(
            _ request: TransferRequest, onResponse: @escaping @Sendable (TransferResponseHead) throws -> Void,
            onBody: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
        ) async throws -> TransferResponseHead {
            if request.method == "HEAD" {
                for _ in 0..<500 where !order.withLock({ $0.contains("range") }) { try await Task.sleep(for: .milliseconds(20)) }
                order.withLock { $0.append("head") }
            } else if request.headers.contains(where: { $0.0 == "Range" }) {
                order.withLock { if !$0.contains("range") { $0.append("range") } }
            }
            return try await inner.get(request, onResponse: onResponse, onBody: onBody)
        }
    }

    @Test func aRememberedModeIsUsedNextAndFoundOutAgainWhenTheOriginChanges() async throws {
        let rig = try OriginRangeTests.Rig(.multipart)
        try rig.publish(1, files: Self.bigFiles(version: 1))
        let root = try TemporaryDirectory(prefix: "origin-mode")
        #expect(try await rig.sync(root.path).changes.first?.via == .archive)

        // Found out (HEAD beside the index), remembered: several ranges a request.
        var built = try rig.publish(2, files: Self.bigFiles(version: 2))
        var before = rig.origin.accessLog().count
        #expect(try await rig.sync(root.path).changes.first?.via == .files)
        #expect(Self.support(root, rig, built) == .multipart)
        #expect(rig.origin.accessLog().dropFirst(before).contains { $0.method == "HEAD" })

        // The origin now answers one range a request (S3-like): the remembered mode asks several, the
        // whole-file answer is cut off at its head, and the same sync asks again one range at a time.
        try rig.origin.reload(locations: "max_ranges 1;")
        built = try rig.publish(3, files: Self.bigFiles(version: 3))
        before = rig.origin.accessLog().count
        let events = EventLog()
        let report = try await rig.sync(root.path, events: events)
        #expect(report.changes.first?.via == .files, "\(events.all)")
        var gets = Self.archiveGets(rig, built, from: before)
        let whole = gets.filter { $0.status == 200 }
        #expect(whole.count == 1, "\(gets)")
        let archive = try #require(FileSystem.fileSize(rig.repo + "/" + built.archiveURL))
        #expect(whole.allSatisfy { Int64($0.bytesSent) < archive / 2 }, "cut off at \(whole.map(\.bytesSent)) of \(archive) B")
        #expect(gets.filter { $0.status == 206 }.allSatisfy { !($0.range ?? ",").contains(",") })
        #expect(Self.support(root, rig, built) == .single)
        #expect(!rig.origin.accessLog().dropFirst(before).contains { $0.method == "HEAD" })

        // The next sync starts right: one range a request from the first.
        built = try rig.publish(4, files: Self.bigFiles(version: 4))
        before = rig.origin.accessLog().count
        #expect(try await rig.sync(root.path).changes.first?.via == .files)
        gets = Self.archiveGets(rig, built, from: before)
        #expect(!gets.isEmpty && gets.allSatisfy { $0.status == 206 && !($0.range ?? ",").contains(",") }, "\(gets)")

        // Another server behind the name (another Server header), serving several ranges again: the
        // record is dropped, and the sync after finds the origin out afresh.
        try rig.origin.reload(locations: "server_tokens off;")
        built = try rig.publish(5, files: Self.bigFiles(version: 5))
        #expect(try await rig.sync(root.path).changes.first?.via == .files)
        #expect(Self.support(root, rig, built) == nil)
        built = try rig.publish(6, files: Self.bigFiles(version: 6))
        before = rig.origin.accessLog().count
        #expect(try await rig.sync(root.path).changes.first?.via == .files)
        gets = Self.archiveGets(rig, built, from: before)
        #expect(gets.count == 1 && gets.first?.range?.contains(",") == true && gets.first?.status == 206, "\(gets)")
        #expect(Self.support(root, rig, built) == .multipart)

        // A record a week old is found out again.
        let layout = CacheLayout(root: root.path)
        let aged = try String(contentsOfFile: layout.origins, encoding: .utf8).replacingOccurrences(
            of: #""checked" : [0-9.e+]+"#, with: "\"checked\" : 1000", options: .regularExpression)
        try aged.write(toFile: layout.origins, atomically: true, encoding: .utf8)
        #expect(Self.support(root, rig, built) == nil)
    }

    @Test func anOriginThatServesNoRangesIsRememberedAndSkipped() async throws {
        let rig = try OriginRangeTests.Rig(.multipart)
        try rig.origin.reload(locations: "max_ranges 0;")
        try rig.publish(1)
        let root = try TemporaryDirectory(prefix: "origin-none")
        _ = try await rig.sync(root.path)
        for version in 2...4 { try rig.publish(version) }
        var built = try #require(rig.built[4])
        let events = EventLog()
        // No ranges at all: the one-range answer is cut off, and the archive comes in the same sync.
        #expect(try await rig.sync(root.path, events: events).changes.first?.via == .archive)
        #expect(Self.support(root, rig, built) == RangeSupport.none)
        // Remembered: the next update goes straight to the archive, without the index.
        built = try rig.publish(5)
        let before = rig.origin.accessLog().count
        #expect(try await rig.sync(root.path).changes.first?.via == .archive)
        usleep(300_000)
        let lines = rig.origin.accessLog().dropFirst(before)
        #expect(!lines.contains { $0.uri == "/" + built.indexURL || $0.range != nil }, "\(Array(lines))")
    }

    @Test func aOneRangePlanMergesTheSmallestGapsWithinItsBudget() {
        let wanted = [
            ByteRange(offset: 0, length: 1000), ByteRange(offset: 1100, length: 1000), ByteRange(offset: 2600, length: 1000),
            ByteRange(offset: 10_000, length: 1000), ByteRange(offset: 50_000, length: 1000),
        ]
        // Gaps 100, 500, 6400, 39000: a budget of 600 merges the first two, not the third.
        let plan = RangePlan(oneRangeARequest: wanted.reversed(), wasteBudget: 600)
        #expect(
            plan.requests.map { $0.spans.map(\.range) } == [
                [ByteRange(offset: 0, length: 3600)], [ByteRange(offset: 10_000, length: 1000)],
                [ByteRange(offset: 50_000, length: 1000)],
            ])
        #expect(plan.requests.allSatisfy { $0.spans.count == 1 && !$0.header.contains(",") })
        #expect(plan.requests.flatMap { $0.spans.flatMap(\.wanted) } == wanted)
        #expect(RangePlan(oneRangeARequest: wanted, wasteBudget: 0).requests.count == 5)
        #expect(RangePlan(oneRangeARequest: wanted, wasteBudget: 46_000).requests.count == 1)
    }
}
