import FoundationEssentials
import Synchronization

/// Sends a root's queued reports to the collector (docs/protocol.md#install-reports): one POST of a JSON array, under the same
/// transport as every other request (libcurl, the sync's CA bundle, https never downgraded), with a
/// deadline of `deadline` seconds for the whole exchange, no redirect followed and an answer read up to
/// `maximumAnswerBytes`. A 2xx takes the events out of the queue; anything else leaves them for the
/// next sync.
package struct ReportSender: Sendable {
    package var transport: any Transport
    package var caBundle: String?
    /// Seconds a send may take in all: connecting, sending, the answer.
    package var deadline: TimeInterval = 10

    /// A collector's answer is a short acknowledgement; more is not read.
    package static let maximumAnswerBytes = 64 << 10

    package init(transport: any Transport, caBundle: String?) {
        self.transport = transport
        self.caBundle = caBundle
    }

    /// What a send did.
    package enum Outcome: Sendable, Equatable {
        /// Nothing was queued.
        case nothingQueued
        case sent(events: Int)
        /// Not sent (kept for the next sync), or refused by the collector as malformed (dropped:
        /// sending them again would be refused again).
        case notSent(events: Int, reason: String)
    }

    /// Statuses with which a collector refuses the body itself: sending it again cannot succeed.
    static let refusals: Set<Int> = [400, 413, 422]

    /// Sends what `queue` holds now to the URL its state names; notes the outcome in the queue.
    package func sendQueued(_ queue: ReportQueue, now: @Sendable () -> Date) async -> Outcome {
        guard let state = queue.loadState(), let url = URL(string: state.url) else { return .nothingQueued }
        let events = queue.queued()
        guard !events.isEmpty else { return .nothingQueued }
        let reason: String
        do {
            let answer = try await post(events, to: url)
            if (200..<300).contains(answer.status) {
                queue.sent(events, at: now())
                return .sent(events: events.count)
            }
            let text = answer.text.isEmpty ? "" : ": \(answer.text)"
            if Self.refusals.contains(answer.status) {
                reason = "\(state.url) refused them (HTTP status \(answer.status)\(text)); dropped, they would be refused again"
                queue.sent(events, at: nil)
            } else if (300..<400).contains(answer.status) {
                reason =
                    "\(state.url) answered \(answer.status), a redirect\(answer.location.map { " to \($0)" } ?? ""): install reports follow no redirect"
            } else {
                reason = "\(state.url) answered HTTP status \(answer.status)\(text)"
            }
        } catch let error as OfflinePkgError {
            switch error {
            case .transfer(_, let failure): reason = "\(state.url): \(failure)"
            case .slowRetrieval(_, let protection): reason = "\(state.url): \(protection)"
            default: reason = "\(error)"
            }
        } catch {
            reason = "\(error)"
        }
        let shown = ReportEvent.sanitized(reason, root: queue.layout.root)
        queue.notSent(SyncFailure(time: now(), exitStatus: 1, message: shown))
        return .notSent(events: events.count, reason: shown)
    }

    /// The collector's answer: its status, where a redirect pointed, and the first line of its text.
    package struct Answer: Sendable {
        package var status: Int
        package var location: String?
        package var text: String
    }

    /// POSTs `events` (lines of JSON) as one array to `url`; throws when no answer came (connection,
    /// deadline, an answer longer than `maximumAnswerBytes`).
    package func post(_ events: [[UInt8]], to url: URL) async throws -> Answer {
        var body: [UInt8] = [UInt8(ascii: "[")]
        for (index, event) in events.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body += event
        }
        body.append(UInt8(ascii: "]"))
        let source = BodySource(body)
        var request = TransferRequest(
            url: url, headers: [("Content-Type", "application/json")],
            limits: RetrievalLimits(stallTimeout: deadline, minimumRate: 0),
            deadline: TransferDeadline(what: "sending install reports", seconds: deadline), connectTimeout: deadline,
            caBundle: caBundle)
        request.method = "POST"
        request.body = { source.read(into: $0) }
        request.bodyLength = Int64(body.count)
        request.followsRedirects = false
        let received = Mutex<[UInt8]>([])
        let target = url.absoluteString
        let head = try await transport.get(
            request, onResponse: { _ in },
            onBody: { chunk in
                try received.withLock { received in
                    guard received.count + chunk.count <= Self.maximumAnswerBytes else {
                        throw OfflinePkgError.sizeMismatch(
                            what: "the answer of \(target)", reason: "longer than \(Self.maximumAnswerBytes) bytes")
                    }
                    received += chunk
                }
            })
        let text = received.withLock { bytes in
            String(decoding: bytes.prefix(300), as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        }
        return Answer(status: head.status, location: head.headers["location"], text: OfflinePkgError.escaped(text))
    }
}

/// A request body handed to libcurl in pieces, from its own thread.
private final class BodySource: Sendable {
    private let bytes: [UInt8]
    private let offset = Atomic<Int>(0)

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let start = offset.load(ordering: .relaxed)
        let count = min(buffer.count, bytes.count - start)
        guard count > 0 else { return 0 }
        bytes.withUnsafeBytes { source in
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[start..<(start + count)]))
        }
        offset.store(start + count, ordering: .relaxed)
        return count
    }
}
