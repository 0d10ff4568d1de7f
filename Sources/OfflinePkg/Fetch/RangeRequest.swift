/// A run of bytes in a remote file: `offset ..< offset + length`.
package struct ByteRange: Sendable, Hashable, Comparable {
    package var offset: Int64
    package var length: Int64

    package init(offset: Int64, length: Int64) {
        self.offset = offset
        self.length = length
    }

    package var end: Int64 { offset + length }

    package static func < (a: ByteRange, b: ByteRange) -> Bool { (a.offset, a.length) < (b.offset, b.length) }

    /// The `first-last` form of a `Range` header (both inclusive).
    var headerText: String { "\(offset)-\(end - 1)" }
}

/// How the wanted ranges of one file travel: merged into spans, the spans grouped into requests.
///
/// Neighbours are merged when the gap between them is at most `mergeGap` (default 4 KiB). A range
/// costs more than its bytes: about 20 bytes in the `Range` header and about 110 in the response (the
/// boundary line, `Content-Type` and `Content-Range` of its part), and every `maxHeaderBytes` of
/// ranges cost another request, whose round trip on a mobile link (50–100 ms at 1 MB/s) is worth tens
/// of kilobytes. A gap of a few KiB is paid for by fewer parts and fewer requests; a larger threshold
/// would fetch whole unchanged files between two changed ones (a site's frames are a few KiB each), so
/// the bytes fetched would drift above the changed frames themselves.
package struct RangePlan: Sendable, Equatable {
    /// One contiguous run asked for, covering one or more wanted ranges (and the gaps between them).
    package struct Span: Sendable, Equatable {
        package var range: ByteRange
        /// The wanted ranges inside `range`, sorted.
        package var wanted: [ByteRange]
    }

    /// One HTTP request: its spans, sorted and apart.
    package struct Request: Sendable, Equatable {
        package var spans: [Span]
        /// The `Range` header's value: `bytes=a-b,c-d,…`.
        package var header: String { "bytes=" + spans.map(\.range.headerText).joined(separator: ",") }
        package var bytes: Int64 { spans.reduce(0) { $0 + $1.range.length } }
    }

    package static let defaultMergeGap: Int64 = 4 << 10
    /// A `Range` value this long fits every common server's header limit (nginx takes 8 KiB a line,
    /// CDNs 8–16 KiB for all headers): about 200 spans a request.
    package static let defaultMaxHeaderBytes = 4000

    package var requests: [Request]

    /// Bytes the requests ask for (the wanted ranges and the merged gaps).
    package var bytes: Int64 { requests.reduce(0) { $0 + $1.bytes } }

    /// Plans `wanted` (any order, not overlapping; empty ranges are dropped).
    package init(
        _ wanted: [ByteRange], mergeGap: Int64 = RangePlan.defaultMergeGap, maxHeaderBytes: Int = RangePlan.defaultMaxHeaderBytes
    ) {
        var spans = [Span]()
        for range in wanted.filter({ $0.length > 0 }).sorted() {
            if var last = spans.last, range.offset >= last.range.end, range.offset - last.range.end <= mergeGap {
                last.range.length = range.end - last.range.offset
                last.wanted.append(range)
                spans[spans.count - 1] = last
            } else {
                spans.append(Span(range: range, wanted: [range]))
            }
        }
        var requests = [Request]()
        var headerBytes = 0
        for span in spans {
            let cost = span.range.headerText.utf8.count + 1
            if let last = requests.last, !last.spans.isEmpty, headerBytes + cost <= maxHeaderBytes {
                requests[requests.count - 1].spans.append(span)
                headerBytes += cost
            } else {
                requests.append(Request(spans: [span]))
                headerBytes = "bytes=".utf8.count + cost
            }
        }
        self.requests = requests
    }
}

extension RangePlan {
    /// Plans `wanted` for an origin that answers one range a request (S3, GCS, R2, OSS): every span is
    /// a request of its own, and neighbours are merged smallest gap first while the bytes of the merged
    /// gaps stay within `wasteBudget`. That is the fewest requests the budget allows: no other choice of
    /// gaps of the same total merges more of them. The requests run side by side (HTTP/2 streams, or a
    /// few HTTP/1.1 connections), so fewer requests save their heads' bytes more than time.
    package init(oneRangeARequest wanted: [ByteRange], wasteBudget: Int64) {
        let sorted = wanted.filter { $0.length > 0 }.sorted()
        var merges = [Bool](repeating: false, count: max(0, sorted.count - 1))
        var spent: Int64 = 0
        let gaps = merges.indices.map { (index: $0, bytes: max(0, sorted[$0 + 1].offset - sorted[$0].end)) }
        for gap in gaps.sorted(by: { ($0.bytes, $0.index) < ($1.bytes, $1.index) }) {
            guard spent + gap.bytes <= wasteBudget else { break }
            spent += gap.bytes
            merges[gap.index] = true
        }
        var requests = [Request]()
        for (index, range) in sorted.enumerated() {
            if index > 0, merges[index - 1], var last = requests.last?.spans.last {
                last.range.length = range.end - last.range.offset
                last.wanted.append(range)
                requests[requests.count - 1].spans[0] = last
            } else {
                requests.append(Request(spans: [Span(range: range, wanted: [range])]))
            }
        }
        self.requests = requests
    }

    /// The gap bytes a one-range-a-request plan may spend to save requests: a sixteenth of what is
    /// wanted, plus 4 KiB (what about ten answers' heads cost), so a small update merges its close
    /// neighbours and a large one stays within a few percent of its own bytes.
    package static func wasteBudget(forWanted bytes: Int64) -> Int64 { bytes / 16 + 4096 }
}
