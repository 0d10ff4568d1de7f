/// An absolute http(s) URL reduced to what lookups compare (SPEC §7): lowercase host, default port
/// dropped, scheme folded (`http` and `https` alike), query and fragment gone, path percent-decoded with
/// its dot-segments removed. The result is one string, `key` = `host[:port]/path`.
package struct LookupURL: Sendable {
    package let key: String
    /// Where the path starts in `key`.
    package let pathStart: String.Index

    package var path: Substring { key[pathStart...] }

    package init?(_ text: String) {
        var text = text
        guard let key = text.withUTF8({ LookupURL.makeKey($0) }) else { return nil }
        self.key = key
        self.pathStart = key.firstIndex(of: "/")!
    }

    private static func lower(_ byte: UInt8) -> UInt8 {
        (0x41...0x5a).contains(byte) ? byte | 0x20 : byte
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    private static func makeKey(_ input: UnsafeBufferPointer<UInt8>) -> String? {
        // Scheme.
        var index = 0
        while index < input.count && input[index] != UInt8(ascii: ":") { index += 1 }
        let defaultPort: [UInt8]
        switch index {
        case 4 where lower(input[0]) == 0x68 && lower(input[1]) == 0x74 && lower(input[2]) == 0x74 && lower(input[3]) == 0x70:
            defaultPort = Array("80".utf8)
        case 5 where lower(input[0]) == 0x68 && lower(input[1]) == 0x74 && lower(input[2]) == 0x74 && lower(input[3]) == 0x70
            && lower(input[4]) == 0x73:
            defaultPort = Array("443".utf8)
        default: return nil
        }
        guard index + 2 < input.count, input[index + 1] == UInt8(ascii: "/"), input[index + 2] == UInt8(ascii: "/")
        else { return nil }
        index += 3

        // Authority: [userinfo@]host[:port]
        var authorityEnd = index
        while authorityEnd < input.count, !isPathDelimiter(input[authorityEnd]) { authorityEnd += 1 }
        var hostStart = index
        for position in index..<authorityEnd where input[position] == UInt8(ascii: "@") { hostStart = position + 1 }
        var hostEnd = authorityEnd
        var portStart: Int?
        if hostStart < authorityEnd && input[hostStart] == UInt8(ascii: "[") {
            guard let close = (hostStart..<authorityEnd).first(where: { input[$0] == UInt8(ascii: "]") }) else { return nil }
            hostEnd = close + 1
            if hostEnd < authorityEnd {
                guard input[hostEnd] == UInt8(ascii: ":") else { return nil }
                portStart = hostEnd + 1
            }
        } else if let colon = (hostStart..<authorityEnd).first(where: { input[$0] == UInt8(ascii: ":") }) {
            hostEnd = colon
            portStart = colon + 1
        }
        guard hostEnd > hostStart else { return nil }

        var key = [UInt8]()
        key.reserveCapacity(input.count)
        for position in hostStart..<hostEnd { key.append(lower(input[position])) }
        if let portStart, portStart < authorityEnd {
            var port = Array(input[portStart..<authorityEnd])
            guard port.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
            while port.count > 1 && port.first == UInt8(ascii: "0") { port.removeFirst() }
            if port != defaultPort {
                key.append(UInt8(ascii: ":"))
                key.append(contentsOf: port)
            }
        }

        // Path: up to the query or fragment, percent-decoded, then dot-segments removed.
        var pathEnd = authorityEnd
        while pathEnd < input.count, input[pathEnd] != UInt8(ascii: "?"), input[pathEnd] != UInt8(ascii: "#") { pathEnd += 1 }
        var decoded = [UInt8]()
        decoded.reserveCapacity(pathEnd - authorityEnd + 1)
        var position = authorityEnd
        while position < pathEnd {
            let byte = input[position]
            if byte == UInt8(ascii: "%") {
                guard position + 2 < pathEnd,
                    let high = hexValue(input[position + 1]), let low = hexValue(input[position + 2])
                else { return nil }
                let value = high << 4 | low
                // An encoded slash or NUL would let a request name a different path than it shows.
                if value == UInt8(ascii: "/") || value == 0 { return nil }
                decoded.append(value)
                position += 3
            } else {
                decoded.append(byte)
                position += 1
            }
        }
        if decoded.first != UInt8(ascii: "/") { decoded.insert(UInt8(ascii: "/"), at: 0) }
        removeDotSegments(decoded, into: &key)
        return String(decoding: key, as: UTF8.self)
    }

    private static func isPathDelimiter(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#")
    }

    /// RFC 3986 §5.2.4 over an absolute path, appending the result to `output`.
    private static func removeDotSegments(_ path: [UInt8], into output: inout [UInt8]) {
        let base = output.count
        var segments = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
        var result = [ArraySlice<UInt8>]()
        let endsInFolder = segments.last.map { $0.isEmpty || $0 == [0x2e] || $0 == [0x2e, 0x2e] } ?? true
        while let segment = segments.popFirst() {
            if segment.elementsEqual([0x2e]) { continue }
            if segment.elementsEqual([0x2e, 0x2e]) {
                if !result.isEmpty { result.removeLast() }
                continue
            }
            result.append(segment)
        }
        if endsInFolder, result.last?.isEmpty == true { result.removeLast() }
        output.append(UInt8(ascii: "/"))
        for (index, segment) in result.enumerated() {
            if index > 0 { output.append(UInt8(ascii: "/")) }
            output.append(contentsOf: segment)
        }
        if endsInFolder && output.count > base + 1 && output.last != UInt8(ascii: "/") { output.append(UInt8(ascii: "/")) }
    }
}
