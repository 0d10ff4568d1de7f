import FoundationEssentials

/// An HTTP date (RFC 9110 §5.6.7) as a server sends one in `Retry-After`: the IMF-fixdate form,
/// `Sun, 06 Nov 1994 08:49:37 GMT`, which is the one a sender may generate. Read without a formatter:
/// FoundationEssentials has none for it, and Foundation's `DateFormatter` loads ICU.
enum HTTPDate {
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let weekdays: Set = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

    static func parse(_ text: String) -> Date? {
        // "Sun," "06" "Nov" "1994" "08:49:37" "GMT"; the weekday is not checked against the date, as
        // recipients need not (and DateFormatter did not).
        let fields = text.split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count == 6, fields[0].count == 4, fields[0].last == ",", weekdays.contains(String(fields[0].dropLast())),
            fields[5] == "GMT", let day = number(fields[1], digits: 2),
            let month = months.firstIndex(of: String(fields[2])), let year = number(fields[3], digits: 4)
        else { return nil }
        let clock = fields[4].split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, let hour = number(clock[0], digits: 2), let minute = number(clock[1], digits: 2),
            let second = number(clock[2], digits: 2)
        else { return nil }
        return InternetDate.date(year: year, month: month + 1, day: day, hour: hour, minute: minute, second: second)
    }

    /// A field of exactly `digits` ASCII digits.
    private static func number(_ field: Substring, digits: Int) -> Int? {
        guard field.utf8.count == digits, field.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
        else { return nil }
        return Int(field)
    }
}
