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
