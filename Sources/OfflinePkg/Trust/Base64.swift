/// Standard base64 (RFC 4648 §4, with `=` padding), as minisign writes it through libsodium's
/// `sodium_base64_VARIANT_ORIGINAL`.
///
/// The decoder is strict on purpose: no whitespace, padding required, no non-zero bits after the last
/// byte. Signature and key lines have exactly one encoding, so anything else is damage or tampering.
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xff, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    package static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let remaining = bytes.count - index
            let b0 = UInt32(bytes[index])
            let b1 = remaining > 1 ? UInt32(bytes[index + 1]) : 0
            let b2 = remaining > 2 ? UInt32(bytes[index + 2]) : 0
            let group = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(group >> 18 & 0x3f)])
            out.append(alphabet[Int(group >> 12 & 0x3f)])
            out.append(remaining > 1 ? alphabet[Int(group >> 6 & 0x3f)] : UInt8(ascii: "="))
            out.append(remaining > 2 ? alphabet[Int(group & 0x3f)] : UInt8(ascii: "="))
            index += 3
        }
        return out
    }

    /// The decoded bytes, or nil when `text` is not canonical padded base64.
    package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        let text = Array(text)
        guard text.count % 4 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(text.count / 4 * 3)
        var index = 0
        while index < text.count {
            let isLast = index + 4 == text.count
            let padding = isLast ? text[index...].reversed().prefix { $0 == UInt8(ascii: "=") }.count : 0
            guard padding <= 2 else { return nil }
            var group: UInt32 = 0
            for offset in 0..<4 {
                let character = text[index + offset]
                if offset >= 4 - padding {
                    group <<= 6
                    continue
                }
                let value = values[Int(character)]
                guard value != 0xff else { return nil }
                group = group << 6 | UInt32(value)
            }
            // Bits below the last byte must be zero, or two texts would decode to the same bytes.
            if padding == 1 && group & 0xff != 0 { return nil }
            if padding == 2 && group & 0xffff != 0 { return nil }
            out.append(UInt8(group >> 16 & 0xff))
            if padding < 2 { out.append(UInt8(group >> 8 & 0xff)) }
            if padding < 1 { out.append(UInt8(group & 0xff)) }
            index += 4
        }
        return out
    }
}
