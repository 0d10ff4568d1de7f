internal import CCrypto

/// Incremental SHA-256 with OpenSSL's low-level functions (SHA-NI accelerated where the CPU has it);
/// `CCrypto`'s shim says why not EVP.
package final class SHA256 {
    private var context = SHA256_CTX()

    package init() { ccrypto_sha256_init(&context) }

    package func update(_ buffer: UnsafeRawBufferPointer) {
        guard buffer.count > 0 else { return }
        ccrypto_sha256_update(&context, buffer.baseAddress, buffer.count)
    }

    package func update(_ bytes: some Sequence<UInt8>) {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// Finishes the digest; the hasher must not be used afterwards.
    package func finalize() -> Digest {
        var bytes = [UInt8](repeating: 0, count: 32)
        ccrypto_sha256_final(&context, &bytes)
        return Digest(bytes: bytes)
    }

    package static func hash(_ bytes: some Sequence<UInt8>) -> Digest {
        let hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    package struct Digest: Equatable, Hashable, Sendable, CustomStringConvertible {
        package let bytes: [UInt8]
        package var hex: String { Hex.encode(bytes) }
        package var description: String { hex }
    }
}

/// Lowercase hexadecimal, as the manifest and coreutils write hashes.
package enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Writes the bytes of the hex digits of `text` into `out`, which must be exactly half its length,
    /// without an array in between; false, and `out` all zeros, when `text` is not such a run.
    package static func decode(_ text: String, into out: UnsafeMutableRawBufferPointer) -> Bool {
        var text = text
        let decoded = text.withUTF8 { digits in
            guard digits.count == 2 * out.count else { return false }
            for index in 0..<out.count {
                guard let high = value(digits[2 * index]), let low = value(digits[2 * index + 1]) else { return false }
                out[index] = high << 4 | low
            }
            return true
        }
        if !decoded { out.initializeMemory(as: UInt8.self, repeating: 0) }
        return decoded
    }

    /// The value of one hex digit, either case.
    package static func value(_ digit: UInt8) -> UInt8? {
        switch digit {
        case 0x30...0x39: digit - 0x30
        case 0x61...0x66: digit - 0x61 + 10
        case 0x41...0x46: digit - 0x41 + 10
        default: nil
        }
    }

    /// The bytes of lowercase (or uppercase) hex digits, or nil when `text` is not an even run of them.
    package static func decode(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(digits.count / 2)
        for pair in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[pair]), let low = value(digits[pair + 1]) else { return nil }
            out.append(high << 4 | low)
        }
        return out
    }

    /// Whether `text` is exactly `count` lowercase hex digits (64 for a sha256).
    package static func isLowercase(_ text: String, count: Int) -> Bool {
        text.utf8.count == count && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}
