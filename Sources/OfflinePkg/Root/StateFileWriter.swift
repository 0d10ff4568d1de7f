import FoundationEssentials

/// A JSON value of a cache-root file, written without `JSONEncoder`.
///
/// `JSONEncoder`'s first use in a process pays what `JSONDecoder`'s does (`StateFileReadable`): generic
/// metadata for every container and `CodingKeys` type, each conformance found by scanning the binary's
/// conformance records, about 1 M instructions to write `state.json` at the end of a no-op sync. This
/// writes what `JSONCoding.encode` does, as `JSONDecoder` and `StateFileReadable` read it: members in
/// the order of their keys' bytes, absent optionals left out, dates as `JSONCoding` writes them, two
/// spaces of indent (an empty list or object on three lines, as `JSONEncoder` writes it), and only the
/// escapes JSON requires (no `\/`): the bytes `JSONCoding.encode` wrote, for keys in ASCII.
package indirect enum StateJSON {
    case string(String)
    case number(Int64)
    case boolean(Bool)
    case array([StateJSON])
    case object([(key: String, value: StateJSON)])

    /// `date` as `JSONCoding.encode` writes it.
    package static func date(_ date: Date) -> StateJSON {
        .string(InternetDate.format(date) ?? date.formatted(.iso8601))
    }

    package static func integer(_ value: some BinaryInteger) -> StateJSON { .number(Int64(value)) }

    /// An object of the members whose value is not nil (`encodeIfPresent`).
    package static func members(_ members: KeyValuePairs<String, StateJSON?>) -> StateJSON {
        .object(members.compactMap { member in member.value.map { (member.key, $0) } })
    }

    package static func dictionary<T>(_ dictionary: [String: T], _ value: (T) -> StateJSON) -> StateJSON {
        .object(dictionary.map { ($0.key, value($0.value)) })
    }

    /// The text, as `JSONCoding.encode` lays it out (pretty printed, keys sorted).
    package var text: [UInt8] {
        var text = [UInt8]()
        write(into: &text, indent: 0)
        return text
    }

    private func write(into text: inout [UInt8], indent: Int) {
        switch self {
        case .string(let string): Self.write(string, into: &text)
        case .number(let number): text += String(number).utf8
        case .boolean(let boolean): text += (boolean ? "true" : "false").utf8
        case .array(let elements):
            text += (elements.isEmpty ? "[\n\n" : "[\n").utf8
            for (index, element) in elements.enumerated() {
                text += repeatElement(UInt8(ascii: " "), count: indent + 2)
                element.write(into: &text, indent: indent + 2)
                text += (index + 1 < elements.count ? ",\n" : "\n").utf8
            }
            text += repeatElement(UInt8(ascii: " "), count: indent)
            text.append(UInt8(ascii: "]"))
        case .object(let members):
            text += (members.isEmpty ? "{\n\n" : "{\n").utf8
            let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            for (index, member) in sorted.enumerated() {
                text += repeatElement(UInt8(ascii: " "), count: indent + 2)
                Self.write(member.key, into: &text)
                text += " : ".utf8
                member.value.write(into: &text, indent: indent + 2)
                text += (index + 1 < sorted.count ? ",\n" : "\n").utf8
            }
            text += repeatElement(UInt8(ascii: " "), count: indent)
            text.append(UInt8(ascii: "}"))
        }
    }

    /// A JSON string: `"` and `\` escaped, control characters as JSONEncoder writes them, the rest as
    /// UTF-8.
    private static func write(_ string: String, into text: inout [UInt8]) {
        text.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): text += #"\""#.utf8
            case UInt8(ascii: "\\"): text += #"\\"#.utf8
            case 0x08: text += #"\b"#.utf8
            case 0x0c: text += #"\f"#.utf8
            case 0x0a: text += #"\n"#.utf8
            case 0x0d: text += #"\r"#.utf8
            case 0x09: text += #"\t"#.utf8
            case 0x00..<0x20: text += (#"\u00"# + Hex.encode([byte])).utf8
            default: text.append(byte)
            }
        }
        text.append(UInt8(ascii: "\""))
    }
}
