/// IP address hosts as the WHATWG URL standard reads and writes them, which is what a browser puts in
/// the `Host` of its requests: `http://0x7f.1/` is sent as `127.0.0.1`, `http://[0:0::1]/` as `[::1]`.
package enum IPAddressText {
    /// Whether a host is to be read as an IPv4 address: its last label (before a final dot) is a
    /// decimal number or `0x` and hex digits (WHATWG "ends in a number").
    package static func endsInNumber(_ host: String) -> Bool {
        var parts = host.split(separator: ".", omittingEmptySubsequences: false)
        if parts.last == "" && parts.count > 1 { parts.removeLast() }
        guard let last = parts.last, !last.isEmpty else { return false }
        if last.utf8.allSatisfy({ (0x30...0x39).contains($0) }) { return true }
        let lower = last.lowercased()
        return lower.hasPrefix("0x") && lower.dropFirst(2).allSatisfy(\.isHexDigit)
    }

    /// The IPv4 address of `host` (decimal, octal `0177`, hex `0x7f` parts; fewer than four parts fill
    /// the last), or nil when a browser refuses the URL.
    package static func parseIPv4(_ host: String) -> UInt32? {
        var parts = host.split(separator: ".", omittingEmptySubsequences: false)
        if parts.last == "" && parts.count > 1 { parts.removeLast() }
        guard (1...4).contains(parts.count) else { return nil }
        var numbers = [UInt64]()
        for part in parts {
            var digits = Substring(part)
            var radix = 10
            if digits.count >= 2, digits.lowercased().hasPrefix("0x") {
                digits = digits.dropFirst(2)
                radix = 16
            } else if digits.count >= 2, digits.hasPrefix("0") {
                digits = digits.dropFirst()
                radix = 8
            }
            if digits.isEmpty {
                guard !part.isEmpty else { return nil }
                numbers.append(0)
                continue
            }
            // Long runs of leading zeros are still a number; cap the value, not the text.
            var value: UInt64 = 0
            for character in digits {
                guard let digit = character.hexDigitValue, digit < radix else { return nil }
                value = min(value * UInt64(radix) + UInt64(digit), 1 << 40)
            }
            numbers.append(value)
        }
        guard numbers.dropLast().allSatisfy({ $0 <= 255 }) else { return nil }
        let last = numbers.last!
        guard last < UInt64(1) << (8 * (5 - numbers.count)) else { return nil }
        var address = last
        for (index, number) in numbers.dropLast().enumerated() { address += number << (8 * (3 - index)) }
        return UInt32(address)
    }

    package static func formatIPv4(_ address: UInt32) -> String {
        (0..<4).map { String(address >> (24 - 8 * $0) & 0xff) }.joined(separator: ".")
    }

    /// The eight 16-bit pieces of an IPv6 literal (without brackets), or nil when it is not one.
    package static func parseIPv6(_ text: String) -> [UInt16]? {
        let input = Array(text.utf8)
        var pieces = [UInt16](repeating: 0, count: 8)
        var pieceIndex = 0
        var compress: Int?
        var pointer = 0
        if input.first == UInt8(ascii: ":") {
            guard input.count > 1, input[1] == UInt8(ascii: ":") else { return nil }
            pointer = 2
            pieceIndex = 1
            compress = 1
        }
        while pointer < input.count {
            guard pieceIndex < 8 else { return nil }
            if input[pointer] == UInt8(ascii: ":") {
                guard compress == nil else { return nil }
                pointer += 1
                pieceIndex += 1
                compress = pieceIndex
                continue
            }
            var value = 0
            var length = 0
            while length < 4, pointer < input.count, let digit = Character(Unicode.Scalar(input[pointer])).hexDigitValue {
                value = value * 16 + digit
                pointer += 1
                length += 1
            }
            if pointer < input.count && input[pointer] == UInt8(ascii: ".") {
                // An IPv4 address in the last two pieces.
                guard length > 0, pieceIndex <= 6 else { return nil }
                pointer -= length
                let tail = String(decoding: input[pointer...], as: UTF8.self)
                let parts = tail.split(separator: ".", omittingEmptySubsequences: false)
                guard parts.count == 4,
                    parts.allSatisfy({ part in
                        !part.isEmpty && part.utf8.allSatisfy { (0x30...0x39).contains($0) }
                            && (part == "0" || !part.hasPrefix("0")) && (Int(part) ?? 256) <= 255
                    })
                else { return nil }
                let bytes = parts.map { UInt16($0)! }
                pieces[pieceIndex] = bytes[0] << 8 | bytes[1]
                pieces[pieceIndex + 1] = bytes[2] << 8 | bytes[3]
                pieceIndex += 2
                pointer = input.count
                break
            }
            guard length > 0 else { return nil }
            pieces[pieceIndex] = UInt16(value)
            pieceIndex += 1
            if pointer < input.count {
                guard input[pointer] == UInt8(ascii: ":"), pointer + 1 < input.count else { return nil }
                pointer += 1
            }
        }
        if let compress {
            var swaps = pieceIndex - compress
            pieceIndex = 7
            while pieceIndex != 0 && swaps > 0 {
                pieces.swapAt(pieceIndex, compress + swaps - 1)
                pieceIndex -= 1
                swaps -= 1
            }
        } else if pieceIndex != 8 {
            return nil
        }
        return pieces
    }

    /// RFC 5952 text (as the WHATWG serializer writes it): lowercase hex without leading zeros, the
    /// first longest run of two or more zero pieces as `::`, no dotted IPv4 tail.
    package static func formatIPv6(_ pieces: [UInt16]) -> String {
        var bestStart = -1
        var bestLength = 1
        var index = 0
        while index < 8 {
            guard pieces[index] == 0 else {
                index += 1
                continue
            }
            var end = index
            while end < 8 && pieces[end] == 0 { end += 1 }
            if end - index > bestLength {
                bestStart = index
                bestLength = end - index
            }
            index = end
        }
        var text = ""
        index = 0
        while index < 8 {
            if index == bestStart {
                text += index == 0 ? "::" : ":"
                index += bestLength
                continue
            }
            text += String(pieces[index], radix: 16)
            if index < 7 { text += ":" }
            index += 1
        }
        return text
    }
}
