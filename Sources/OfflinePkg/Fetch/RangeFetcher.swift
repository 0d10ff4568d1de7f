import FoundationEssentials

/// Fetches the spans of one `RangePlan.Request` with one GET and `Range: bytes=a-b,c-d,…`, reading the
/// answer as it streams: a `206` with `multipart/byteranges`, or a single-part `206` (one span asked,
/// or a server that coalesced them). Each part must be exactly one asked span, or several neighbouring
/// ones coalesced; every span must come once. Anything else (a 200 with the whole file, a part outside
/// the asked ranges, a missing or garbled part) is `.rangesRefused`: the caller falls back to a whole
/// download. Transfer failures (resets, stalls) are thrown as the transport reports them.
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
    /// bytes that crossed the network (part headers included).
    package func fetch(
        _ request: RangePlan.Request, from url: URL, size: Int64,
        receive: @escaping @Sendable (ByteRange, Int64, UnsafeRawBufferPointer) throws -> Void
    ) async throws -> Int64 {
        let response = RangeResponse(spans: request.spans, size: size, url: url.absoluteString, receive: receive)
        let deadline = TransferDeadline(what: "range request of \(request.spans.count) spans", seconds: timeLimit(request))
        let transfer = TransferRequest(
            url: url, headers: [("Range", request.header)], limits: limits, deadline: deadline, caBundle: caBundle)
        _ = try await transport.get(transfer) { head in
            try response.begin(head)
        } onBody: { chunk in
            try response.body(chunk)
        }
        try response.end()
        return response.received
    }

    /// The most one request may take: `rangeRequestDeadline` plus a second per 16 KiB asked. A link of a
    /// few tens of KB/s (a poor mobile one) fetches any request well within it; a server slower than
    /// that on ranges loses nothing by the fallback, which asks it for one plain download.
    package func timeLimit(_ request: RangePlan.Request) -> TimeInterval {
        limits.rangeRequestDeadline + Double(request.bytes) / Double(16 << 10)
    }
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
    private var delivered: [Bool]
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

    func begin(_ head: TransferResponseHead) throws {
        began = true
        if head.status == 200 {
            throw refused("HTTP 200 with the whole file instead of 206: the server ignores Range")
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

    func end() throws {
        guard began else { throw refused("no response") }
        if let parser = multipart {
            do { try parser.finish() } catch { throw refused("garbled multipart/byteranges body: \(error.reason)") }
        } else if let (range, next) = single, next != range.end {
            throw refused("the body ended after \(next - range.offset) of \(range.length) bytes")
        }
        if let missing = delivered.firstIndex(of: false) {
            throw refused("no part for bytes \(spans[missing].range.headerText)")
        }
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
