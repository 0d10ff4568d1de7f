import FoundationEssentials

/// Shared JSON settings for the files offlinepkg writes into a cache root.
package enum JSONCoding {
    package static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        // Not `.iso8601`: its first use builds an ICU calendar and time zone, a few milliseconds of
        // every command that opens a root. The encoder writes `2026-12-01T14:26:52Z`; anything else
        // falls back to Foundation's parser.
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            if let date = InternetDate.parse(text) { return date }
            do {
                return try Date(text, strategy: .iso8601)
            } catch {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "expected an ISO 8601 date, got \"\(text)\""))
            }
        }
        return decoder
    }

    /// Reads one of the cache root's JSON files; nil when it does not exist yet.
    package static func load<T: Decodable>(_ type: T.Type, from path: String) throws -> T? {
        guard FileSystem.exists(path) else { return nil }
        return try decode(type, from: FileSystem.read(path), path: path)
    }

    /// Decodes one of the cache root's JSON files; a failure is the root's corrupt state at `path`.
    package static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], path: String) throws -> T {
        do {
            return try decoder.decode(type, from: Data(bytes))
        } catch {
            throw OfflinePkgError.corruptState(path: path, reason: "\(error)")
        }
    }

    package static func encode(_ value: some Encodable, pretty: Bool = true) -> [UInt8] {
        let encoder = JSONEncoder()
        // `.iso8601`'s text, written without its format style, whose first use looks up the current time
        // zone (a tenth of a no-op sync's instructions went to encoding its state).
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(InternetDate.format(date) ?? date.formatted(.iso8601))
        }
        encoder.outputFormatting =
            pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        // Encoding our own plain structs cannot fail; a failure here is a programming error.
        return Array(try! encoder.encode(value))
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the one form the encoder's `.iso8601` writes, read and written without ICU.
package enum InternetDate {
    /// The text `.iso8601` writes for `date` (UTC, whole seconds, the fraction dropped), for the years
    /// `parse` reads; nil for the others, which are Foundation's to write.
    package static func format(_ date: Date) -> String? {
        let interval = date.timeIntervalSince1970.rounded(.down)
        guard interval.isFinite, abs(interval) < 1e12 else { return nil }
        let seconds = Int(interval)
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let time = seconds - days * 86_400
        // The calendar date of a day count from 1970-01-01 (Howard Hinnant's civil_from_days).
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        guard (1583...9999).contains(year) else { return nil }
        var text = [UInt8]()
        text.reserveCapacity(20)
        func digits(_ value: Int, _ count: Int, then separator: UInt8?) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
            if let separator { text.append(separator) }
        }
        digits(year, 4, then: UInt8(ascii: "-"))
        digits(month, 2, then: UInt8(ascii: "-"))
        digits(day, 2, then: UInt8(ascii: "T"))
        digits(time / 3600, 2, then: UInt8(ascii: ":"))
        digits(time / 60 % 60, 2, then: UInt8(ascii: ":"))
        digits(time % 60, 2, then: UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    package static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[19] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19)
        else { return nil }
        return date(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }

    /// The UTC time of a calendar date and time, nil when one of them is out of range.
    package static func date(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Date? {
        guard (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61,
            // Foundation's calendar is Julian before the Gregorian reform: those dates are its to read.
            year >= 1583
        else { return nil }
        // Days from 1970-01-01 to the date, proleptic Gregorian (Howard Hinnant's days_from_civil).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        // A day past the month's end (2026-02-30) is no date: let Foundation's parser refuse it.
        guard day <= daysIn(month: month, year: year) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}
