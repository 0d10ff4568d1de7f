internal import CByteLanes

/// An absolute http(s) URL reduced to what lookups compare (docs/protocol.md#lookups): lowercase host, default port
/// dropped, scheme folded (`http` and `https` alike), userinfo, query and fragment gone, path
/// percent-decoded with its dot-segments removed. The key is `host[:port]/path`, as bytes.
///
/// Resolving is the hot path of a web view (every asset of every page), so the key is written into a
/// caller-provided buffer in one pass: no `String`, no array, no allocation per call.
package enum LookupURL {
    /// A normalised key, valid only inside the closure that received it.
    package struct Key {
        package let bytes: UnsafeBufferPointer<UInt8>
        /// Where the path (its leading `/`) starts in `bytes`.
        package let pathStart: Int
    }

    /// The key of `url` as a string (route prefixes, tests), or nil when it is not an absolute http(s) URL.
    package static func key(_ url: String) -> String? {
        withKey(url) { String(decoding: $0.bytes, as: UTF8.self) }
    }

    /// Normalises `url` into a temporary buffer and hands its key to `body`; nil when `url` is not an
    /// absolute http(s) URL or its path is refused (an encoded `/` or NUL).
    @inline(__always)
    package static func withKey<Result>(_ url: String, _ body: (Key) -> Result?) -> Result? {
        var url = url
        // Native strings are contiguous UTF-8 already: withUTF8 does not copy them.
        return url.withUTF8 { withKey(utf8: $0, body) }
    }

    @inline(__always)
    package static func withKey<Result>(utf8 input: UnsafeBufferPointer<UInt8>, _ body: (Key) -> Result?) -> Result? {
        // The key is never longer than the input (the dropped "http://" pays for the one "/" that may
        // be added); the buffer lives on the stack for any URL a web view sends.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: input.count + 1) { buffer in
            guard let (count, pathStart) = normalize(input, into: buffer.baseAddress!) else { return nil }
            return body(Key(bytes: UnsafeBufferPointer(start: buffer.baseAddress, count: count), pathStart: pathStart))
        }
    }

    private static let slash = UInt8(ascii: "/")
    private static let dot = UInt8(ascii: ".")

    @inline(__always) private static func lower(_ byte: UInt8) -> UInt8 {
        byte &- 0x41 < 26 ? byte | 0x20 : byte
    }

    /// 0...15 for a hex digit, 0xff otherwise.
    @inline(__always) private static func hexValue(_ byte: UInt8) -> UInt8 {
        switch byte {
        case 0x30...0x39: byte &- 0x30
        case 0x41...0x46: byte &- 0x41 &+ 10
        case 0x61...0x66: byte &- 0x61 &+ 10
        default: 0xff
        }
    }

    /// Whether `byte` is one of `bits` (a mask over 0x20...0x5f). A shift and a test instead of a
    /// `switch`, which compiles to an indirect jump per byte: the loops below run once per URL byte.
    @inline(__always) private static func isOne(of bits: UInt64, _ byte: UInt8) -> Bool {
        let offset = byte &- 0x20
        return offset < 64 && (bits >> UInt64(offset)) & 1 != 0
    }

    // Bit n stands for byte 0x20 + n. Computed properties of literals fold to constants (a stored
    // `static let` would cost a lazy-initialisation check inside the loops).
    /// "#" (0x23), "/" (0x2f) and "?" (0x3f) end the authority and a path segment.
    private static var delimiters: UInt64 { 1 << 0x03 | 1 << 0x0f | 1 << 0x1f }
    /// Also "%" (0x25), which starts an escape in the path.
    private static var pathSpecials: UInt64 { delimiters | 1 << 0x05 }
    /// Also "@" (0x40), which ends userinfo in the authority.
    private static var authoritySpecials: UInt64 { delimiters | 1 << 0x20 }

    /// Which normalisers `normalize` runs: the common-form fast path and, when it declines, the careful
    /// one (what lookups use), or one of them alone (the differential tests compare them).
    package enum Normalizers: Sendable {
        case commonFormThenCareful, commonFormOnly, carefulOnly
    }

    /// The key of `url` through the given normalisers, as bytes (a decoded path need not be UTF-8); for
    /// `.commonFormOnly`, nil also when the fast path declines.
    package static func key(_ url: String, using normalizers: Normalizers) -> [UInt8]? {
        var url = url
        return url.withUTF8 { key(utf8: $0, using: normalizers) }
    }

    /// The same for bytes where they lie (the fuzzer's input, whose every byte past the end is poisoned).
    package static func key(utf8 input: UnsafeBufferPointer<UInt8>, using normalizers: Normalizers) -> [UInt8]? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: input.count + 1) { buffer in
            guard let (count, _) = normalize(input, into: buffer.baseAddress!, using: normalizers) else { return nil }
            return Array(UnsafeBufferPointer(start: buffer.baseAddress, count: count))
        }
    }

    /// The length of `url`'s key, or nil: the normaliser alone, for the benchmark's breakdown.
    package static func keyLength(_ url: String) -> Int? {
        withKey(url) { $0.bytes.count }
    }

    /// Writes the key of `input` to `output` (room for `input.count + 1` bytes); returns its length and
    /// where its path starts. Not inlined: callers stay small enough for the optimiser to inline
    /// their closures (an outlined closure context cost a retain and release of the index per call).
    @inline(never)
    private static func normalize(
        _ input: UnsafeBufferPointer<UInt8>, into output: UnsafeMutablePointer<UInt8>, using normalizers: Normalizers = .commonFormThenCareful
    ) -> (Int, Int)? {
        let count = input.count
        guard count >= 8, let text = input.baseAddress else { return nil }

        // Scheme: http or https, any case. Both map to the same key; only the default port differs.
        guard lower(text[0]) == UInt8(ascii: "h"), lower(text[1]) == UInt8(ascii: "t"),
            lower(text[2]) == UInt8(ascii: "t"), lower(text[3]) == UInt8(ascii: "p")
        else { return nil }
        let isHTTPS = lower(text[4]) == UInt8(ascii: "s")
        var position = isHTTPS ? 5 : 4
        guard position + 3 <= count, text[position] == UInt8(ascii: ":"), text[position + 1] == slash,
            text[position + 2] == slash
        else { return nil }
        position += 3
        switch normalizers {
        case .commonFormThenCareful:
            if let key = normalizeCommonForm(text, count: count, isHTTPS: isHTTPS, from: position, into: output) { return key }
        case .commonFormOnly:
            return normalizeCommonForm(text, count: count, isHTTPS: isHTTPS, from: position, into: output)
        case .carefulOnly:
            break
        }
        return normalizeCarefully(text, count: count, isHTTPS: isHTTPS, from: position, into: output)
    }

    /// The fast path, for the form nearly every request of a web view has: no userinfo, no IPv6
    /// literal, a decimal port or none, a non-empty path without `%` and without a segment that starts
    /// with `.`. Such a key is the URL with its host lowercased, a default port dropped, and scheme,
    /// query and fragment cut: sixteen bytes are tested and copied per step (`CByteLanes`). Nil means
    /// "not that form": the careful path decides (and may still accept the URL).
    @inline(__always)
    private static func normalizeCommonForm(
        _ text: UnsafePointer<UInt8>, count: Int, isHTTPS: Bool, from start: Int, into output: UnsafeMutablePointer<UInt8>
    ) -> (Int, Int)? {
        // Host. A block is stored before it is judged: `output` has room for it (a key byte never sits
        // after its input byte, and the input has sixteen more here), and a declined URL is rewritten
        // from the start by the careful path.
        var position = start
        var hostEnd = -1
        while position &+ 16 <= count {
            let block = cbytelanes_scan_host(text + position, output + (position &- start))
            if block.ends != 0 {
                let lane = Int(block.ends.trailingZeroBitCount)
                if block.unusual & lanes(before: lane) != 0 { return nil }
                hostEnd = position &+ lane
                break
            }
            if block.unusual != 0 { return nil }
            position &+= 16
        }
        if hostEnd < 0 {
            while position < count {
                let byte = text[position]
                if byte == slash || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") || byte == UInt8(ascii: ":") {
                    break
                }
                if byte == UInt8(ascii: "@") || byte == UInt8(ascii: "[") { return nil }
                output[position &- start] = lower(byte)
                position &+= 1
            }
            hostEnd = position
        }
        guard hostEnd > start, hostEnd < count else { return nil }

        // Port: digits only, up to the path. A default one is dropped and leading zeros go, so the key
        // is shorter than the input by `shift` bytes from here on.
        position = hostEnd
        var shift = 0
        if text[position] == UInt8(ascii: ":") {
            var end = position &+ 1
            while end < count && text[end] &- 0x30 <= 9 { end &+= 1 }
            // "host:/", "user:pass@host", "host:x": the careful path.
            guard end > position &+ 1, end < count, text[end] == slash else { return nil }
            var digits = position &+ 1
            while digits < end &- 1 && text[digits] == UInt8(ascii: "0") { digits &+= 1 }
            let length = end &- digits
            let isDefault =
                isHTTPS
                ? length == 3 && text[digits] == 0x34 && text[digits &+ 1] == 0x34 && text[digits &+ 2] == 0x33
                : length == 2 && text[digits] == 0x38 && text[digits &+ 1] == 0x30
            if isDefault {
                shift = end &- position
            } else {
                output[position &- start] = UInt8(ascii: ":")
                for index in digits..<end { output[index &- start &- (digits &- position &- 1)] = text[index] }
                shift = digits &- position &- 1
            }
            position = end
        }
        guard text[position] == slash else { return nil }
        // Input byte `i` of the path goes to output byte `i - inputOffset`.
        let inputOffset = start &+ shift
        let pathStart = position &- inputOffset
        let pathInput = position

        // Path, copied as it is up to "?" or "#". A "." right after a "/" may start a dot-segment and
        // "%" an escape: both go the careful way. `afterSlash` carries a "/" in the last lane of one
        // block to the first lane of the next.
        var afterSlash: UInt32 = 0
        while position &+ 16 <= count {
            let block = cbytelanes_scan_path(text + position, output + (position &- inputOffset))
            let unusual = block.percents | block.dots & (block.slashes << 1 | afterSlash)
            if block.ends != 0 {
                let lane = Int(block.ends.trailingZeroBitCount)
                if unusual & lanes(before: lane) != 0 { return nil }
                return (position &+ lane &- inputOffset, pathStart)
            }
            if unusual != 0 { return nil }
            afterSlash = block.slashes >> 15
            position &+= 16
        }
        guard position < count else { return (position &- inputOffset, pathStart) }
        if count &- 16 >= pathInput {
            // The last bytes, as one block that ends where the input does and overlaps bytes already
            // copied: all of them path, so rewritten with the same bytes. Its lanes before `position`
            // passed already (no end, no escape, no dot-segment), so the block is judged whole; each
            // new lane has the byte before it in the block.
            let from = count &- 16
            let block = cbytelanes_scan_path(text + from, output + (from &- inputOffset))
            let end = block.ends != 0 ? Int(block.ends.trailingZeroBitCount) : 16
            if (block.percents | block.dots & block.slashes << 1) & lanes(before: end) != 0 { return nil }
            return (from &+ end &- inputOffset, pathStart)
        }
        // A path of fewer than sixteen bytes, byte by byte.
        var previousIsSlash = false
        while position < count {
            let byte = text[position]
            if byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
            if byte == UInt8(ascii: "%") || (byte == dot && previousIsSlash) { return nil }
            previousIsSlash = byte == slash
            output[position &- inputOffset] = byte
            position &+= 1
        }
        return (position &- inputOffset, pathStart)
    }

    /// The lanes of a block's mask strictly before lane `lane` (0...16).
    @inline(__always) private static func lanes(before lane: Int) -> UInt32 {
        (1 << UInt32(truncatingIfNeeded: lane)) &- 1
    }

    /// Every URL the fast path declines: userinfo, IPv6 literals, escapes, dot-segments, empty paths.
    private static func normalizeCarefully(
        _ text: UnsafePointer<UInt8>, count: Int, isHTTPS: Bool, from start: Int, into output: UnsafeMutablePointer<UInt8>
    ) -> (Int, Int)? {
        var position = start
        // Authority: [userinfo@]host[:port]. The last "@" ends the userinfo, as in a browser.
        var authorityEnd = position
        var hostStart = position
        while authorityEnd < count {
            let byte = text[authorityEnd]
            if isOne(of: authoritySpecials, byte) {
                if byte != UInt8(ascii: "@") { break }
                hostStart = authorityEnd &+ 1
            }
            authorityEnd &+= 1
        }
        var written = 0
        var portStart = -1
        var cursor = hostStart
        if cursor < authorityEnd && text[cursor] == UInt8(ascii: "[") {
            // An IPv6 literal keeps its brackets; its colons are not a port.
            while cursor < authorityEnd && text[cursor] != UInt8(ascii: "]") {
                output[written] = lower(text[cursor])
                written += 1
                cursor += 1
            }
            guard cursor < authorityEnd else { return nil }
            output[written] = UInt8(ascii: "]")
            written += 1
            cursor += 1
            if cursor < authorityEnd {
                guard text[cursor] == UInt8(ascii: ":") else { return nil }
                portStart = cursor + 1
            }
        } else {
            while cursor < authorityEnd && text[cursor] != UInt8(ascii: ":") {
                output[written] = lower(text[cursor])
                written += 1
                cursor += 1
            }
            if cursor < authorityEnd { portStart = cursor + 1 }
        }
        guard written > 0 else { return nil }
        if portStart >= 0 && portStart < authorityEnd {
            for index in portStart..<authorityEnd where text[index] &- 0x30 > 9 { return nil }
            var digits = portStart
            while digits < authorityEnd - 1 && text[digits] == UInt8(ascii: "0") { digits += 1 }
            let length = authorityEnd - digits
            let isDefault =
                isHTTPS
                ? length == 3 && text[digits] == 0x34 && text[digits + 1] == 0x34 && text[digits + 2] == 0x33
                : length == 2 && text[digits] == 0x38 && text[digits + 1] == 0x30
            if !isDefault {
                output[written] = UInt8(ascii: ":")
                written += 1
                for index in digits..<authorityEnd {
                    output[written] = text[index]
                    written += 1
                }
            }
        }

        // Path, up to the query or fragment: decoded and dot-segment-free (RFC 3986 §5.2.4) in one
        // pass, segment by segment. A ".." pops the segment before it but never the leading "/", so
        // no key can climb out of its host — and so no lookup out of a tree.
        let pathStart = written
        output[written] = slash
        written += 1
        position = authorityEnd
        if position < count && text[position] == slash { position += 1 }
        var segmentStart = written
        while true {
            while position < count {
                let byte = text[position]
                if !isOne(of: pathSpecials, byte) {
                    output[written] = byte
                    position &+= 1
                    written &+= 1
                    continue
                }
                if byte != UInt8(ascii: "%") { break }
                // A "%" not followed by two hex digits is a literal "%", as browsers send it (docs/protocol.md#lookups).
                let high = position + 2 < count ? hexValue(text[position + 1]) : 0xff
                let low = position + 2 < count ? hexValue(text[position + 2]) : 0xff
                guard high < 16 && low < 16 else {
                    output[written] = byte
                    position &+= 1
                    written &+= 1
                    continue
                }
                let value = high << 4 | low
                // An encoded slash or NUL would let a request name another path than it shows.
                if value == slash || value == 0 { return nil }
                output[written] = value
                position &+= 3
                written &+= 1
            }
            let atEnd = position == count || text[position] != slash
            let length = written - segmentStart
            if length == 1 && output[segmentStart] == dot {
                written = segmentStart
            } else if length == 2 && output[segmentStart] == dot && output[segmentStart + 1] == dot {
                written = segmentStart
                if segmentStart > pathStart + 1 {
                    var previous = segmentStart - 2
                    while output[previous] != slash { previous -= 1 }
                    written = previous + 1
                }
            } else if !atEnd {
                output[written] = slash
                written += 1
            }
            if atEnd { break }
            position += 1
            segmentStart = written
        }
        return (written, pathStart)
    }
}
