import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg
@testable import OfflinePkgReports

/// `offlinepkg reports serve --db FILE` as a process, on a free port (or `port`), and its URL.
final class CollectorProcess: @unchecked Sendable {
    // Used by one test at a time.
    let process: ChildProcess
    let url: URL
    var port: Int { url.port ?? 0 }

    init(database: String, port: Int = 0) throws {
        process = try ChildProcess(OfflinePkgBinary.path, ["reports", "serve", "--db", database, "--port", "\(port)"])
        guard let line = process.firstLine(timeout: 20), let url = URL(string: line) else {
            throw TestSupportError("reports serve did not start: \(process.wait(timeout: 5).stderr)")
        }
        self.url = url
    }

    /// SIGTERM (a clean stop) and the wait.
    @discardableResult
    func stop() -> ProcessResult {
        process.signal(SIGTERM)
        return process.wait(timeout: 20)
    }

    deinit { _ = process.kill() }
}

/// One HTTP answer, as the tests read it.
struct Answer: Sendable {
    var status: Int
    var text: String
}

/// POSTs `body` to `url` with the device's own client (libcurl), `Content-Length` set or (`chunked`)
/// not; the answer, whatever its status.
func post(_ url: URL, _ body: [UInt8], chunked: Bool = false, timeout: TimeInterval = 30) async throws -> Answer {
    final class Source: @unchecked Sendable {
        // Read by libcurl's one thread.
        let bytes: [UInt8]
        var offset = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }
    }
    let source = Source(body)
    var request = TransferRequest(
        url: url, headers: [("Content-Type", "application/json")], limits: .init(stallTimeout: timeout, minimumRate: 0),
        deadline: TransferDeadline(what: "a test's POST", seconds: timeout))
    request.method = "POST"
    request.bodyLength = chunked ? nil : Int64(body.count)
    request.body = { buffer in
        let count = min(buffer.count, source.bytes.count - source.offset)
        guard count > 0 else { return 0 }
        source.bytes.withUnsafeBytes {
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[source.offset..<(source.offset + count)]))
        }
        source.offset += count
        return count
    }
    let received = Mutex<[UInt8]>([])
    let head = try await CurlTransport().get(
        request, onResponse: { _ in }, onBody: { chunk in received.withLock { $0 += chunk } })
    return Answer(status: head.status, text: received.withLock { String(decoding: $0, as: UTF8.self) })
}

func get(_ url: URL) async throws -> Answer {
    let received = Mutex<[UInt8]>([])
    let head = try await CurlTransport().get(
        TransferRequest(url: url), onResponse: { _ in }, onBody: { chunk in received.withLock { $0 += chunk } })
    return Answer(status: head.status, text: received.withLock { String(decoding: $0, as: UTF8.self) })
}

/// A made-up event: `device` did `kind` at `time` (seconds from now, default now) to `packages`.
func event(
    _ device: String, _ kind: ReportEvent.Kind, _ packages: [ReportEvent.Package], at time: Date = Date(), error: String? = nil,
    sequence: Int? = 1
) -> ReportEvent {
    ReportEvent(
        device: device, time: time, event: kind, sequence: sequence, packages: packages,
        exitStatus: kind == .activated ? 0 : (kind == .failed ? 4 : nil), error: error,
        durationMs: kind == .activated || kind == .failed ? 900 : nil,
        shellVersion: "3.2")
}

/// A POST body of `events`.
func body(_ events: [ReportEvent]) -> [UInt8] {
    Array("[".utf8) + Array(events.map { String(decoding: $0.json, as: UTF8.self) }.joined(separator: ",").utf8) + Array("]".utf8)
}

/// `sqlite3 FILE SQL`'s output, trimmed: the stock tool, reading the database as anyone would.
func sqlite(_ database: String, _ sql: String) throws -> String {
    let result = try run("sqlite3", [database, sql]).checked("sqlite3 \(sql)")
    return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Runs `count` jobs, at most `width` at once; throws the first failures once all have ended.
func inParallel(_ count: Int, width: Int, _ job: @escaping @Sendable (Int) async throws -> Void) async throws {
    let failures = Shared<[String]>([])
    await withTaskGroup(of: Void.self) { group in
        for index in 0..<count {
            if index >= width { await group.next() }
            group.addTask {
                do { try await job(index) } catch { failures.with { $0.append("job \(index): \(error)") } }
            }
        }
    }
    let all = failures.current
    if !all.isEmpty { throw TestSupportError(all.prefix(5).joined(separator: "\n")) }
}

/// A value shared by tasks, behind a lock.
final class Shared<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
    func with<R>(_ body: (inout Value) -> R) -> R { value.withLock { body(&$0) } }
    var current: Value { value.withLock { $0 } }
}
