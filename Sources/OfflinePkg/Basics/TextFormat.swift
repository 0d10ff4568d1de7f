/// The few `String(format:)` forms offlinepkg prints, which FoundationEssentials lacks (its
/// `String(format:)` is NSString's, in full Foundation).
package enum TextFormat {
    /// `U+001F`: a scalar as Unicode names it, at least four uppercase hex digits (`%04X`).
    package static func codePoint(_ scalar: Unicode.Scalar) -> String {
        let digits = String(scalar.value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// `value` with `places` digits after the point, rounded half away from zero (`%.1f` for 1).
    package static func fixed(_ value: Double, places: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let scaled = (abs(value) * scale).rounded(.toNearestOrAwayFromZero)
        guard scaled < 9e18 else { return "\(value)" }
        let units = UInt64(scaled)
        let whole = units / UInt64(scale)
        let sign = value < 0 && units != 0 ? "-" : ""
        guard places > 0 else { return sign + String(whole) }
        let fraction = String(units % UInt64(scale))
        return sign + String(whole) + "." + String(repeating: "0", count: places - fraction.count) + fraction
    }
}
