/// Reads a `multipart/byteranges` body (RFC 9110 §14.6) as it streams: each part's `Content-Range`,
/// then exactly that many bytes, handed on in the chunks they arrived in, never buffered whole. Strict
/// where it matters: a part without a `Content-Range`, a delimiter where bytes should follow, a line
/// past its bound or a body that ends inside a part is garbled. The preamble and epilogue are skipped
/// (bounded).
package struct MultipartByteranges {
    private enum State: Equatable {
        /// Before the first delimiter.
        case preamble
        /// Reading a part's header lines.
        case headers
        /// Inside a part's bytes: `remaining` to go, the next one at `offset` in the remote file.
        case body(offset: Int64, remaining: Int64)
        /// After a part's bytes: the CRLF that ends them.
        case bodyEnd
        /// After that CRLF: the next delimiter or the closing one.
        case delimiter
        /// After the closing delimiter.
        case epilogue
    }

    private let delimiter: [UInt8]
    private var state = State.preamble
    private var line: [UInt8] = []
    private var partRange: ByteRange?
    private var skipped = 0
    /// The bytes of the current part's header lines so far.
    private var headerBytes = 0
    /// The total the parts' `Content-Range` name (`bytes a-b/total`), the same for every part.
    package private(set) var total: Int64?

    private static let maxLine = 1024
    private static let maxSkipped = 4096
    /// A part's header lines together (a real part has two or three short ones): past this, a server
    /// sending header lines without end would stream unbounded bytes that are no asked range.
    private static let maxPartHeaders = 8192

    /// `boundary` from the response's `Content-Type`, e.g. `multipart/byteranges; boundary=00000000000000000001`.
    package init?(contentType: String) {
        let parts = contentType.split(separator: ";").map { $0.trimmingWhitespace() }
        guard let first = parts.first, first.lowercased() == "multipart/byteranges" else { return nil }
        guard let parameter = parts.dropFirst().first(where: { $0.lowercased().hasPrefix("boundary=") }) else { return nil }
        var boundary = String(parameter.dropFirst("boundary=".count))
        if boundary.hasPrefix("\""), boundary.hasSuffix("\""), boundary.count >= 2 { boundary = String(boundary.dropFirst().dropLast()) }
        guard !boundary.isEmpty, boundary.utf8.count <= 70 else { return nil }
        delimiter = Array("--\(boundary)".utf8)
    }

    /// Whether the closing delimiter has been read.
    package var isComplete: Bool { state == .epilogue }

    /// Feeds the next chunk of the body. `partStarted` gets each part's range before its bytes, `bytes`
    /// the part's bytes with the remote offset of the first one.
    package mutating func feed(
        _ chunk: UnsafeRawBufferPointer, partStarted: (ByteRange) throws -> Void,
        bytes: (Int64, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var index = 0
        while index < chunk.count {
            if case .body(let offset, let remaining) = state {
                let count = Int(min(Int64(chunk.count - index), remaining))
                try bytes(offset, UnsafeRawBufferPointer(rebasing: chunk[index..<(index + count)]))
                index += count
                state = remaining == Int64(count) ? .bodyEnd : .body(offset: offset + Int64(count), remaining: remaining - Int64(count))
                continue
            }
            let byte = chunk[index]
            index += 1
            if state == .epilogue {
                skipped += 1
                if skipped > Self.maxSkipped { throw GarbledPart(reason: "more than \(Self.maxSkipped) bytes after the closing delimiter") }
                continue
            }
            guard byte == UInt8(ascii: "\n") else {
                line.append(byte)
                if line.count > Self.maxLine { throw GarbledPart(reason: "a line longer than \(Self.maxLine) bytes") }
                continue
            }
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            let text = line
            line.removeAll(keepingCapacity: true)
            try take(line: text, partStarted: partStarted)
        }
    }

    private mutating func take(line text: [UInt8], partStarted: (ByteRange) throws -> Void) throws {
        switch state {
        case .preamble:
            if text == delimiter {
                state = .headers
                headerBytes = 0
            } else {
                skipped += text.count + 2
                if skipped > Self.maxSkipped { throw GarbledPart(reason: "no delimiter in the first \(Self.maxSkipped) bytes") }
            }
        case .headers:
            if text.isEmpty {
                guard let range = partRange else { throw GarbledPart(reason: "a part without a Content-Range") }
                partRange = nil
                try partStarted(range)
                state = .body(offset: range.offset, remaining: range.length)
                return
            }
            headerBytes += text.count + 2
            if headerBytes > Self.maxPartHeaders {
                throw GarbledPart(reason: "a part's header lines longer than \(Self.maxPartHeaders) bytes together")
            }
            let header = String(decoding: text, as: UTF8.self)
            guard let colon = header.firstIndex(of: ":") else { throw GarbledPart(reason: "a part header without a colon") }
            guard header[..<colon].trimmingWhitespace().lowercased() == "content-range" else { return }
            guard let (range, total) = ContentRange.parse(String(header[header.index(after: colon)...])) else {
                throw GarbledPart(reason: "a part's Content-Range is not bytes a-b/total: \(OfflinePkgError.escaped(header))")
            }
            if let known = self.total, known != total {
                throw GarbledPart(reason: "parts name totals \(known) and \(total)")
            }
            self.total = total
            partRange = range
        case .bodyEnd:
            guard text.isEmpty else { throw GarbledPart(reason: "a part's bytes run on past its Content-Range") }
            state = .delimiter
        case .delimiter:
            if text == delimiter {
                state = .headers
                headerBytes = 0
            } else if text == delimiter + Array("--".utf8) {
                state = .epilogue
                skipped = 0
            } else {
                throw GarbledPart(reason: "no delimiter after a part")
            }
        case .body, .epilogue:
            break  // `feed` handles these without lines
        }
    }

    /// Called at the end of the body: a body that stops inside a part, or before its closing delimiter, is garbled.
    package func finish() throws(GarbledPart) {
        guard state == .epilogue else { throw GarbledPart(reason: "the body ended before the closing delimiter") }
    }

    /// Why the body is not a well-formed `multipart/byteranges` (a callback's own errors pass through).
    package struct GarbledPart: Error {
        package var reason: String
    }
}

/// `Content-Range: bytes first-last/total` (RFC 9110 §14.4), the total required.
enum ContentRange {
    static func parse(_ value: String) -> (ByteRange, Int64)? {
        let text = value.trimmingWhitespace()
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let rest = text.dropFirst("bytes ".count).trimmingWhitespace()
        let halves = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2, let total = Int64(halves[1]) else { return nil }
        let bounds = halves[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, first <= last,
            last < total
        else { return nil }
        return (ByteRange(offset: first, length: last - first + 1), total)
    }
}
