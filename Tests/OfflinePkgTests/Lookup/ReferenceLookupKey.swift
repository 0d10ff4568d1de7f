/// The lookup key of docs/protocol.md#lookups, written the plain way — arrays, no pointers, RFC 3986 §5.2.4 for the
/// dot-segments — as the oracle for the normaliser's fast and careful paths. Slow on purpose: it shares
/// no code and no shortcut with `LookupURL`, so a mistake has to be made twice to go unnoticed.
enum ReferenceLookupKey {
    static func key(_ url: String) -> [UInt8]? {
        let bytes = Array(url.utf8)
        let lowered = bytes.map { $0 >= 0x41 && $0 <= 0x5a ? $0 + 0x20 : $0 }
        let isHTTPS: Bool
        if lowered.starts(with: Array("https://".utf8)) {
            isHTTPS = true
        } else if lowered.starts(with: Array("http://".utf8)) {
            isHTTPS = false
        } else {
            return nil
        }
        let rest = Array(bytes.dropFirst(isHTTPS ? 8 : 7))

        // Authority up to the first "/", "?" or "#"; userinfo up to its last "@".
        let authorityEnd = rest.firstIndex { $0 == 0x2f || $0 == 0x3f || $0 == 0x23 } ?? rest.count
        var hostAndPort = Array(rest[..<authorityEnd])
        if let at = hostAndPort.lastIndex(of: 0x40) { hostAndPort = Array(hostAndPort[(at + 1)...]) }
        var host: [UInt8]
        var port: [UInt8]
        if hostAndPort.first == 0x5b {
            guard let close = hostAndPort.firstIndex(of: 0x5d) else { return nil }
            host = Array(hostAndPort[...close])
            let after = hostAndPort[(close + 1)...]
            if after.isEmpty {
                port = []
            } else {
                guard after.first == 0x3a else { return nil }
                port = Array(after.dropFirst())
            }
        } else if let colon = hostAndPort.firstIndex(of: 0x3a) {
            host = Array(hostAndPort[..<colon])
            port = Array(hostAndPort[(colon + 1)...])
        } else {
            host = hostAndPort
            port = []
        }
        host = host.map { $0 >= 0x41 && $0 <= 0x5a ? $0 + 0x20 : $0 }
        guard !host.isEmpty else { return nil }
        guard port.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        while port.count > 1 && port.first == 0x30 { port.removeFirst() }
        if port == Array((isHTTPS ? "443" : "80").utf8) { port = [] }
        var key = host
        if !port.isEmpty { key += [0x3a] + port }

        // Path up to "?" or "#", percent-decoded; an encoded "/" or NUL, or a broken escape, refuses.
        let pathEnd = rest[authorityEnd...].firstIndex { $0 == 0x3f || $0 == 0x23 } ?? rest.count
        let rawPath = Array(rest[authorityEnd..<pathEnd])
        var path = [UInt8]()
        var index = 0
        while index < rawPath.count {
            if rawPath[index] != 0x25 {
                path.append(rawPath[index])
                index += 1
                continue
            }
            // A "%" not followed by two hex digits is a literal "%" (docs/protocol.md#lookups).
            guard index + 2 < rawPath.count, let high = hex(rawPath[index + 1]), let low = hex(rawPath[index + 2]) else {
                path.append(rawPath[index])
                index += 1
                continue
            }
            let value = high << 4 | low
            if value == 0x2f || value == 0 { return nil }
            path.append(value)
            index += 3
        }
        return key + removeDotSegments(path.isEmpty ? [0x2f] : path)
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    /// RFC 3986 §5.2.4, steps B, C and E, for a path that starts with "/".
    private static func removeDotSegments(_ path: [UInt8]) -> [UInt8] {
        var input = path[...]
        var output = [UInt8]()
        func removeLastSegment() {
            if let slash = output.lastIndex(of: 0x2f) { output.removeSubrange(slash...) } else { output.removeAll() }
        }
        while !input.isEmpty {
            if input.starts(with: Array("/./".utf8)) {
                input = input.dropFirst(2)
            } else if input.elementsEqual(Array("/.".utf8)) {
                input = [0x2f][...]
            } else if input.starts(with: Array("/../".utf8)) {
                input = input.dropFirst(3)
                removeLastSegment()
            } else if input.elementsEqual(Array("/..".utf8)) {
                input = [0x2f][...]
                removeLastSegment()
            } else {
                let next = input.dropFirst().firstIndex(of: 0x2f) ?? input.endIndex
                output += input[..<next]
                input = input[next...]
            }
        }
        return output
    }
}
