import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg

/// Multi-range requests: the plan (merging, the header bound) and the fetch against nginx and against
/// answers nginx would never give.
@Suite struct RangeFetchTests {
    @Test func neighboursWithinTheGapMergeOthersStayApart() {
        let plan = RangePlan(
            [
                ByteRange(offset: 10_000, length: 100), ByteRange(offset: 0, length: 100),
                ByteRange(offset: 100 + 4096, length: 50), ByteRange(offset: 20_000, length: 0),
            ], mergeGap: 4096)
        #expect(plan.requests.count == 1)
        let spans = plan.requests[0].spans
        #expect(spans.map(\.range) == [ByteRange(offset: 0, length: 4246), ByteRange(offset: 10_000, length: 100)])
        #expect(spans[0].wanted == [ByteRange(offset: 0, length: 100), ByteRange(offset: 4196, length: 50)])
        #expect(plan.requests[0].header == "bytes=0-4245,10000-10099")
        // One byte more of gap and they are two spans.
        #expect(RangePlan([ByteRange(offset: 0, length: 1), ByteRange(offset: 4098, length: 1)], mergeGap: 4096).requests[0].spans.count == 2)
    }

    @Test func theHeaderBoundSplitsRequestsAndKeepsEveryRange() {
        let wanted = (0..<1000).map { ByteRange(offset: Int64($0) * 100_000, length: 10) }
        let plan = RangePlan(wanted, maxHeaderBytes: 4000)
        #expect(plan.requests.count > 1)
        #expect(plan.requests.allSatisfy { $0.header.utf8.count <= 4000 })
        #expect(plan.requests.flatMap { $0.spans.flatMap(\.wanted) } == wanted)
        #expect(plan.bytes == 10_000)
    }

    static func randomFile(_ size: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// Fetches `wanted` of `file` from `url` and returns what arrived for each range.
    static func fetch(_ wanted: [ByteRange], size: Int, from url: URL, mergeGap: Int64 = 4096) async throws
        -> (bytes: [ByteRange: [UInt8]], network: Int64)
    {
        let received = Mutex<[ByteRange: [UInt8]]>([:])
        let fetcher = RangeFetcher(transport: CurlTransport(), limits: RetrievalLimits())
        var network: Int64 = 0
        for request in RangePlan(wanted, mergeGap: mergeGap).requests {
            network += try await fetcher.fetch(request, from: url, size: Int64(size)) { range, offset, chunk in
                received.withLock {
                    #expect(Int64($0[range, default: []].count) == offset - range.offset)
                    $0[range, default: []] += Array(chunk)
                }
            }
        }
        return (received.withLock { $0 }, network)
    }

    @Test func nginxAnswersManyRangesInOneMultipartResponse() async throws {
        let folder = try TemporaryDirectory()
        let file = Self.randomFile(1 << 20)
        try folder.write(file, to: "archive.tar.zst")
        let nginx = try NginxServer(documentRoot: folder.path)
        let wanted = [
            ByteRange(offset: 0, length: 700), ByteRange(offset: 2000, length: 10), ByteRange(offset: 300_000, length: 65_000),
            ByteRange(offset: 1_048_000, length: 576),
        ]
        let (bytes, network) = try await Self.fetch(wanted, size: file.count, from: nginx.url("archive.tar.zst"))
        for range in wanted { #expect(bytes[range] == Array(file[Int(range.offset)..<Int(range.end)])) }
        let log = nginx.waitForRequests(1)
        #expect(log.count == 1)
        #expect(log.first?.status == 206)
        #expect(log.first?.range == "bytes=0-2009,300000-364999,1048000-1048575")
        // The merged gap, and a part header per span: nothing like the whole file.
        #expect(network == Int64(log.first?.bodyBytesSent ?? 0))
        #expect(network < 2010 + 65_000 + 576 + 3 * 200)
    }

    @Test func oneSpanIsASinglePart206() async throws {
        let folder = try TemporaryDirectory()
        let file = Self.randomFile(100_000)
        try folder.write(file, to: "a.bin")
        let nginx = try NginxServer(documentRoot: folder.path)
        let wanted = [ByteRange(offset: 5000, length: 1000), ByteRange(offset: 6500, length: 10)]
        let (bytes, network) = try await Self.fetch(wanted, size: file.count, from: nginx.url("a.bin"))
        #expect(bytes[wanted[0]] == Array(file[5000..<6000]))
        #expect(bytes[wanted[1]] == Array(file[6500..<6510]))
        #expect(network == 1510)
        #expect(nginx.waitForRequests(1).first?.range == "bytes=5000-6509")
    }

    @Test(arguments: ["max_ranges 0;", "max_ranges 1;"])
    func aServerIgnoringRangeIsRefusedNotTakenWhole(config: String) async throws {
        let folder = try TemporaryDirectory()
        let file = Self.randomFile(200_000)
        try folder.write(file, to: "a.bin")
        let nginx = try NginxServer(documentRoot: folder.path, locations: "location / { \(config) }")
        let wanted = [ByteRange(offset: 0, length: 10), ByteRange(offset: 100_000, length: 10)]
        await #expect(throws: OfflinePkgError.self) {
            _ = try await Self.fetch(wanted, size: file.count, from: nginx.url("a.bin"))
        }
        do {
            _ = try await Self.fetch(wanted, size: file.count, from: nginx.url("a.bin"))
        } catch let error as OfflinePkgError {
            guard case .rangesRefused(_, let reason) = error else { Issue.record("not rangesRefused: \(error)"); return }
            #expect(reason.contains("200"))
        }
    }

    static let boundary = "b0undary"

    static func multipart(_ parts: [(String, [UInt8])], closing: Bool = true) -> [UInt8] {
        var body = [UInt8]()
        for (range, bytes) in parts {
            body += Array("\r\n--\(boundary)\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes \(range)\r\n\r\n".utf8)
            body += bytes
        }
        if closing { body += Array("\r\n--\(boundary)--\r\n".utf8) }
        return body
    }

    @Test(arguments: [
        ("a part outside the asked ranges", multipart([("0-9/1000", Array(repeating: 1, count: 10)), ("50-59/1000", Array(repeating: 2, count: 10))]), "not asked"),
        ("a missing part", multipart([("0-9/1000", Array(repeating: 1, count: 10))]), "no part for bytes 500-509"),
        ("a part running past its range", multipart([("0-9/1000", Array(repeating: 1, count: 12)), ("500-509/1000", Array(repeating: 2, count: 10))]), "run on"),
        ("no closing delimiter", multipart([("0-9/1000", Array(repeating: 1, count: 10)), ("500-509/1000", Array(repeating: 2, count: 10))], closing: false), "closing delimiter"),
        ("a part without Content-Range", Array("\r\n--\(boundary)\r\nContent-Type: x\r\n\r\n0123456789".utf8), "without a Content-Range"),
        ("another total", multipart([("0-9/999", Array(repeating: 1, count: 10)), ("500-509/999", Array(repeating: 2, count: 10))]), "999"),
        ("the same part twice", multipart([("0-9/1000", Array(repeating: 1, count: 10)), ("0-9/1000", Array(repeating: 1, count: 10))]), "twice"),
        // Header lines without end, each short: bytes that are no asked range must not stream unbounded.
        ("part headers without end", Array("\r\n--\(boundary)\r\n".utf8) + Array(String(repeating: "X-Pad: \(String(repeating: "p", count: 100))\r\n", count: 20_000).utf8)
            + Array("Content-Range: bytes 0-9/1000\r\n\r\n0123456789\r\n--\(boundary)\r\nContent-Range: bytes 500-509/1000\r\n\r\n0123456789\r\n--\(boundary)--\r\n".utf8), "header lines longer"),
    ] as [(String, [UInt8], String)])
    func aBadMultipartAnswerIsRefused(what: String, body: [UInt8], expected: String) async throws {
        let folder = try TemporaryDirectory()
        try folder.write(Array(repeating: 0, count: 1000), to: "a.bin")
        let server = try FaultServer(documentRoot: folder.path)
        server.script(
            "/a.bin",
            [.respond(status: 206, headers: ["Content-Type": "multipart/byteranges; boundary=\(Self.boundary)"], body: body)])
        let wanted = [ByteRange(offset: 0, length: 10), ByteRange(offset: 500, length: 10)]
        do {
            _ = try await Self.fetch(wanted, size: 1000, from: server.url("a.bin"), mergeGap: 0)
            Issue.record("\(what): accepted")
        } catch let error as OfflinePkgError {
            guard case .rangesRefused(_, let reason) = error else { Issue.record("\(what): \(error)"); return }
            #expect(reason.contains(expected), "\(what): \(reason)")
        }
    }

    @Test func aWellFormedHandMadeAnswerIsTakenAndACoalescedPartToo() async throws {
        let folder = try TemporaryDirectory()
        try folder.write(Array(repeating: 0, count: 1000), to: "a.bin")
        let server = try FaultServer(documentRoot: folder.path)
        let whole = (0..<510).map { UInt8($0 % 251) }
        server.script(
            "/a.bin",
            [
                .respond(
                    status: 206, headers: ["Content-Type": "multipart/byteranges; boundary=\(Self.boundary)"],
                    body: Array("preamble\r\n".utf8) + Self.multipart([("500-509/1000", Array(whole[500..<510])), ("0-9/1000", Array(whole[0..<10]))])),
                // A server may coalesce both into one part: the gap is read and dropped.
                .respond(status: 206, headers: ["Content-Range": "bytes 0-509/1000"], body: whole),
                // A plain 200 from a server that ignores Range.
                .normal,
            ])
        let wanted = [ByteRange(offset: 0, length: 10), ByteRange(offset: 500, length: 10)]
        for _ in 0..<2 {
            let (bytes, _) = try await Self.fetch(wanted, size: 1000, from: server.url("a.bin"), mergeGap: 0)
            #expect(bytes[wanted[0]] == Array(whole[0..<10]))
            #expect(bytes[wanted[1]] == Array(whole[500..<510]))
        }
        await #expect(throws: OfflinePkgError.self) { _ = try await Self.fetch(wanted, size: 1000, from: server.url("a.bin"), mergeGap: 0) }
    }
}
