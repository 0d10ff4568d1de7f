import FoundationEssentials

/// Fetches the spans of one `RangePlan.Request` with one GET and `Range: bytes=a-b,c-d,…`, reading the
/// answer as it streams: a `206` with `multipart/byteranges`, or a single-part `206` (one span asked,
/// or a server that coalesced them). Each part must be exactly one asked span, or several neighbouring
/// ones coalesced; every span must come once. An origin that answers one range a request (a 200 with
/// the whole file or a 416 to several, as S3, GCS, R2 and OSS do) is told apart by `answer`, so the
/// caller asks again one range at a time; anything else (a 200 to one range, a part outside the asked
/// ranges, a garbled part) is `.rangesRefused`: the caller falls back to a whole download. Transfer
/// failures (resets, stalls) are thrown as the transport reports them.
///
/// Every request runs under the sync's slow-retrieval protections (stall clock, rate floor) and an overall
/// time limit of its own (`timeLimit`): a server that trickles a multipart answer (whose preamble and
/// epilogue `MultipartByteranges` bounds) cannot hold the sync. It ends the file-level way, and the
/// package comes by a delta or the archive in the same sync.
package struct RangeFetcher: Sendable {
    package var transport: any Transport
    package var limits: RetrievalLimits
    package var caBundle: String?

    package init(transport: any Transport, limits: RetrievalLimits, caBundle: String? = nil) {
        self.transport = transport
        self.limits = limits
        self.caBundle = caBundle
    }

    /// One attempt. `receive` gets the bytes of each wanted range of the request's spans, in order and
    /// each once: the range, the remote offset of the chunk's first byte, the chunk. Returns the body
    /// bytes that crossed the network (part headers included). An origin that answers one range a
    /// request is `.rangesRefused` here; `answer` tells it apart.
    package func fetch(
        _ request: RangePlan.Request, from url: URL, size: Int64,
        receive: @escaping @Sendable (ByteRange, Int64, UnsafeRawBufferPointer) throws -> Void
    ) async throws -> Int64 {
        let answer = try await self.answer(request, from: url, size: size, receive: receive)
        switch answer.verdict {
        case .served: return answer.received
        case .oneRangeARequest(let reason), .noRanges(let reason):
            throw OfflinePkgError.rangesRefused(url: url.absoluteString, reason: reason)
        }
    }

    /// What one request brought, and what it says of the origin.
    package struct Answer: Sendable {
        package enum Verdict: Sendable, Equatable {
            /// Every span came: in a multipart/byteranges body when there were several.
            case served
            /// Several ranges were asked, and the origin answers one a request: the whole file (a 200,
            /// cut off at its head), a 416, or a single part of fewer than the asked spans. The spans not
            /// in `delivered` are to be asked again, one a request.
            case oneRangeARequest(reason: String)
            /// One range was asked and the whole file came (cut off at its head): the origin serves no
            /// ranges.
            case noRanges(reason: String)
        }

        package var verdict: Verdict
        /// The spans (by their index in the request) whose bytes all came.
        package var delivered: [Bool]
        /// Body bytes that crossed the network.
        package var received: Int64
        /// The status of the answer, and its `Server` header: another server behind the same name is
        /// another origin (`OriginRanges`).
        package var status: Int
        package var server: String?
    }

    /// One attempt, as `fetch`, telling apart an origin that answers one range a request and one that
    /// serves none. A whole file is never read: the transfer stops at the head of a 200. A garbled
    /// answer or a transfer failure throws.
    package func answer(
        _ request: RangePlan.Request, from url: URL, size: Int64,
        receive: @escaping @Sendable (ByteRange, Int64, UnsafeRawBufferPointer) throws -> Void
    ) async throws -> Answer {
        let response = RangeResponse(spans: request.spans, size: size, url: url.absoluteString, receive: receive)
        let deadline = TransferDeadline(what: "range request of \(request.spans.count) spans", seconds: timeLimit(request))
        let transfer = TransferRequest(
            url: url, headers: [("Range", request.header)], limits: limits, deadline: deadline, caBundle: caBundle)
        do {
            _ = try await transport.get(transfer) { head in
                try response.begin(head)
            } onBody: { chunk in
                try response.body(chunk)
            }
            let verdict = try response.end()
            return response.answer(verdict)
        } catch let stopped as StoppedAtHead {
            return response.answer(stopped.verdict)
        }
    }

    /// The most one request may take: `rangeRequestDeadline` plus a second per 16 KiB asked. A link of a
    /// few tens of KB/s (a poor mobile one) fetches any request well within it; a server slower than
    /// that on ranges loses nothing by the fallback, which asks it for one plain download.
    package func timeLimit(_ request: RangePlan.Request) -> TimeInterval {
        limits.rangeRequestDeadline + Double(request.bytes) / Double(16 << 10)
    }
}

/// Thrown from the head's callback to stop an answer that tells how the origin takes ranges, before
/// any of its body is read.
private struct StoppedAtHead: Error {
    var verdict: RangeFetcher.Answer.Verdict
}

/// One response's state, touched only by its transfer's thread.
private final class RangeResponse: @unchecked Sendable {
    let spans: [RangePlan.Span]
    let size: Int64
    let url: String
    let receive: @Sendable (ByteRange, Int64, UnsafeRawBufferPointer) throws -> Void
    var received: Int64 = 0
    private var began = false
    private var multipart: MultipartByteranges?
    /// A single-part answer: its range and the offset of the next byte.
    private var single: (range: ByteRange, next: Int64)?
    private(set) var delivered: [Bool]
    /// The wanted ranges of the part being read, and the first of them not yet complete.
    private var partWanted: [ByteRange] = []
    private var cursor = 0

    init(
        spans: [RangePlan.Span], size: Int64, url: String,
        receive: @escaping @Sendable (ByteRange, Int64, UnsafeRawBufferPointer) throws -> Void
    ) {
        self.spans = spans
        self.size = size
        self.url = url
        self.receive = receive
        delivered = Array(repeating: false, count: spans.count)
    }

    private func refused(_ reason: String) -> OfflinePkgError { .rangesRefused(url: url, reason: reason) }

    private(set) var status = 0
    private(set) var server: String?

    func answer(_ verdict: RangeFetcher.Answer.Verdict) -> RangeFetcher.Answer {
        RangeFetcher.Answer(verdict: verdict, delivered: delivered, received: received, status: status, server: server)
    }

    func begin(_ head: TransferResponseHead) throws {
        began = true
        status = head.status
        server = head.headers["server"]
        if head.status == 200 {
            if spans.count > 1 {
                throw StoppedAtHead(verdict: .oneRangeARequest(reason: "HTTP 200 with the whole file to \(spans.count) ranges"))
            }
            throw StoppedAtHead(
                verdict: .noRanges(reason: "HTTP 200 with the whole file instead of 206: the server ignores Range"))
        }
        if head.status == 416 && spans.count > 1 {
            throw StoppedAtHead(verdict: .oneRangeARequest(reason: "HTTP 416 to \(spans.count) ranges"))
        }
        if !head.isSuccess { throw OfflinePkgError.transfer(url: url, failure: head.failure) }
        guard head.status == 206 else { throw refused("HTTP \(head.status) instead of 206") }
        if let coding = head.headers["content-encoding"], coding.lowercased() != "identity" {
            throw refused("content coding \(coding) despite Accept-Encoding: identity")
        }
        let contentType = head.headers["content-type"] ?? ""
        if contentType.lowercased().hasPrefix("multipart/") {
            guard let parser = MultipartByteranges(contentType: contentType) else {
                throw refused("Content-Type \(OfflinePkgError.escaped(contentType)) is not multipart/byteranges with a boundary")
            }
            multipart = parser
            return
        }
        guard let value = head.headers["content-range"], let (range, total) = ContentRange.parse(value) else {
            throw refused("a 206 without a Content-Range or multipart/byteranges body")
        }
        guard total == size else { throw refused("the file on the server is \(total) bytes, the manifest promised \(size)") }
        try startPart(range)
        single = (range, range.offset)
    }

    func body(_ chunk: UnsafeRawBufferPointer) throws {
        received += Int64(chunk.count)
        if var parser = multipart {
            defer { multipart = parser }
            do {
                try parser.feed(chunk, partStarted: startPart, bytes: deliver)
            } catch let garbled as MultipartByteranges.GarbledPart {
                throw refused("garbled multipart/byteranges body: \(garbled.reason)")
            }
            if let total = parser.total, total != size {
                throw refused("the file on the server is \(total) bytes, the manifest promised \(size)")
            }
        } else if let (range, next) = single {
            guard next + Int64(chunk.count) <= range.end else { throw refused("more bytes than the Content-Range names") }
            try deliver(next, chunk)
            single = (range, next + Int64(chunk.count))
        }
    }

    func end() throws -> RangeFetcher.Answer.Verdict {
        guard began else { throw refused("no response") }
        if let parser = multipart {
            do { try parser.finish() } catch { throw refused("garbled multipart/byteranges body: \(error.reason)") }
        } else if let (range, next) = single, next != range.end {
            throw refused("the body ended after \(next - range.offset) of \(range.length) bytes")
        }
        if let missing = delivered.firstIndex(of: false) {
            // One part where several were asked: an origin that serves the first range only.
            if multipart == nil {
                return .oneRangeARequest(
                    reason: "one part of \(spans.count) ranges, without bytes \(spans[missing].range.headerText)")
            }
            throw refused("no part for bytes \(spans[missing].range.headerText)")
        }
        return .served
    }

    /// A part begins: it must be one asked span, or neighbouring asked spans coalesced, none sent before.
    private func startPart(_ range: ByteRange) throws {
        guard let first = spans.firstIndex(where: { $0.range.offset == range.offset }),
            let last = spans[first...].firstIndex(where: { $0.range.end == range.end })
        else { throw refused("a part for bytes \(range.headerText), which were not asked for") }
        guard !delivered[first...last].contains(true) else { throw refused("bytes \(range.headerText) came twice") }
        for index in first...last { delivered[index] = true }
        partWanted = spans[first...last].flatMap(\.wanted)
        cursor = 0
    }

    /// Hands the bytes of `chunk` (starting at remote `offset`) that fall in wanted ranges to `receive`.
    private func deliver(_ offset: Int64, _ chunk: UnsafeRawBufferPointer) throws {
        let end = offset + Int64(chunk.count)
        while cursor < partWanted.count {
            let wanted = partWanted[cursor]
            if wanted.end <= offset {
                cursor += 1
                continue
            }
            if wanted.offset >= end { return }
            let low = max(offset, wanted.offset)
            let high = min(end, wanted.end)
            try receive(wanted, low, UnsafeRawBufferPointer(rebasing: chunk[Int(low - offset)..<Int(high - offset)]))
            guard high == wanted.end else { return }
            cursor += 1
        }
    }
}

extension RangeFetcher {
    /// Asks an origin how it takes ranges without a body: `HEAD` with two one-byte ranges. A 206 says
    /// several a request; a 200 or a 416 (S3, GCS and R2 ignore several ranges, OSS refuses them) says
    /// at most one, which the first one-range answer confirms or refutes. Nil: the origin said nothing
    /// usable (HEAD refused, a failure), and the first request that asks several ranges finds out. Runs
    /// beside the index fetch, so it costs no round trip of its own; the answer, the `Server` header with it.
    package func probe(_ url: URL, size: Int64) async -> (support: RangeSupport, server: String?)? {
        guard size >= 3 else { return nil }
        var request = TransferRequest(
            url: url, headers: [("Range", "bytes=0-0,2-2")], limits: limits,
            deadline: TransferDeadline(what: "range probe", seconds: limits.rangeRequestDeadline), caBundle: caBundle)
        request.method = "HEAD"
        guard let head = try? await transport.get(request, onResponse: { _ in }, onBody: { _ in }) else { return nil }
        switch head.status {
        case 206: return (.multipart, head.headers["server"])
        case 200, 416: return (.single, head.headers["server"])
        default: return nil
        }
    }
}
