/// Punycode (RFC 3492), the encoder only: it turns an internationalised host label into the `xn--`
/// form browsers send, so that a refused route can say what to write instead.
package enum Punycode {
    private static let base: UInt32 = 36
    private static let tMin: UInt32 = 1
    private static let tMax: UInt32 = 26
    private static let skew: UInt32 = 38
    private static let damp: UInt32 = 700
    private static let initialBias: UInt32 = 72
    private static let initialN: UInt32 = 128

    /// The Punycode of `label` (without the `xn--` prefix), or nil on overflow (labels far longer than DNS allows).
    package static func encode(_ label: String) -> String? {
        let input = label.unicodeScalars.map(\.value)
        var output = [UInt8]()
        for scalar in input where scalar < 0x80 { output.append(UInt8(scalar)) }
        let basicCount = UInt32(output.count)
        var handled = basicCount
        if basicCount > 0 { output.append(UInt8(ascii: "-")) }
        var n = initialN
        var delta: UInt32 = 0
        var bias = initialBias
        while handled < UInt32(input.count) {
            // The smallest code point not handled yet.
            let next = input.filter { $0 >= n }.min()!
            let (step, overflow) = (next - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow, let sum = add(delta, step) else { return nil }
            delta = sum
            n = next
            for scalar in input {
                if scalar < n {
                    guard let sum = add(delta, 1) else { return nil }
                    delta = sum
                }
                guard scalar == n else { continue }
                // Write delta as a generalised variable-length integer.
                var q = delta
                var k = base
                while true {
                    let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                    if q < t { break }
                    output.append(digit(t + (q - t) % (base - t)))
                    q = (q - t) / (base - t)
                    k += base
                }
                output.append(digit(q))
                bias = adapt(delta, points: handled + 1, first: handled == basicCount)
                delta = 0
                handled += 1
            }
            delta += 1
            n += 1
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func add(_ a: UInt32, _ b: UInt32) -> UInt32? {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? nil : sum
    }

    private static func digit(_ value: UInt32) -> UInt8 {
        value < 26 ? UInt8(value) + UInt8(ascii: "a") : UInt8(value - 26) + UInt8(ascii: "0")
    }

    private static func adapt(_ delta: UInt32, points: UInt32, first: Bool) -> UInt32 {
        var delta = first ? delta / damp : delta / 2
        delta += delta / points
        var k: UInt32 = 0
        while delta > ((base - tMin) * tMax) / 2 {
            delta /= base - tMin
            k += base
        }
        return k + (base - tMin + 1) * delta / (delta + skew)
    }
}
