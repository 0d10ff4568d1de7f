/// The conditional and partial-request headers of RFC 9110 that a static file server honours, as pure
/// functions over header text so tests can exercise them without a socket.
enum HTTPConditions {
    /// Whether an `If-None-Match` value matches `etag`: `*`, or a comma-separated list of entity tags
    /// compared weakly (RFC 9110 §13.1.2: `W/"x"` matches `"x"`).
    static func noneMatchHits(_ header: Substring, etag: String) -> Bool {
        let wanted = opaque(Substring(etag))
        for item in header.split(separator: ",") {
            let tag = item.trimmingSpaces
            if tag == "*" { return true }
            if opaque(tag) == wanted { return true }
        }
        return false
    }

    /// Whether an `If-Range` value lets a range apply: only a strong, exactly equal entity tag does
    /// (dates are not used: our validator is the ETag).
    static func ifRangeAllows(_ header: Substring, etag: String) -> Bool {
        header.trimmingSpaces == Substring(etag)
    }

    private static func opaque(_ tag: Substring) -> Substring {
        tag.hasPrefix("W/") ? tag.dropFirst(2) : tag
    }
}

/// What a `Range` header asks of a file of `size` bytes.
enum RangeRequest: Equatable {
    /// No usable single range (absent, malformed, not bytes, or several ranges): send the whole file.
    case whole
    /// Bytes `start...end` (inclusive): a 206.
    case partial(start: Int64, end: Int64)
    /// A well-formed range that selects nothing of this file: a 416.
    case unsatisfiable

    /// Parses `bytes=a-b`, `bytes=a-` and `bytes=-n` (RFC 9110 §14.1.2). Several ranges fall back to
    /// the whole file, which the RFC allows and every client handles.
    init(header: Substring, size: Int64) {
        let text = header.trimmingSpaces
        guard text.hasPrefix("bytes="), !text.contains(",") else {
            self = .whole
            return
        }
        let spec = text.dropFirst("bytes=".count).trimmingSpaces
        guard let dash = spec.firstIndex(of: "-") else {
            self = .whole
            return
        }
        let first = spec[..<dash]
        let last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            // Suffix: the last n bytes.
            guard let count = Self.number(last) else {
                self = .whole
                return
            }
            guard count > 0, size > 0 else {
                self = .unsatisfiable
                return
            }
            self = .partial(start: max(0, size - count), end: size - 1)
            return
        }
        guard let start = Self.number(first) else {
            self = .whole
            return
        }
        var end = size - 1
        if !last.isEmpty {
            guard let value = Self.number(last) else {
                self = .whole
                return
            }
            // "bytes=5-2": a last position before the first selects nothing. nginx answers 416, and
            // so does this server (RFC 9110 §14.1.1 leaves a server free to ignore it instead).
            guard value >= start else {
                self = .unsatisfiable
                return
            }
            end = min(value, size - 1)
        }
        self = start < size ? .partial(start: start, end: end) : .unsatisfiable
    }

    private static func number(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.count <= 18, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int64(text)
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while text.first == " " || text.first == "\t" { text.removeFirst() }
        while text.last == " " || text.last == "\t" { text.removeLast() }
        return text
    }
}
