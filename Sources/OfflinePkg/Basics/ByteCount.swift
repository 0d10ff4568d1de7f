/// Byte counts for people: `118 B`, `1.5 KiB`, `3.2 MiB`, in binary units, one decimal.
package enum ByteCount {
    package static func text(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : TextFormat.fixed(value, places: 1) + " " + units[unit]
    }
}
