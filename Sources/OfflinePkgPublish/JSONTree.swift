import OfflinePkg

/// A manifest's JSON as the publisher edits it: dictionaries (`[String: Any]`), arrays (`[Any]`),
/// `String`, `Bool`, `Int`, `JSONTree.Null`, and `JSONTree.Number` for a number that is not a 64-bit
/// integer, kept as it was written so that a value the publisher does not touch comes out as it went in.
/// Read with the manifest's own strict parser, written without Foundation's `JSONSerialization` (full
/// Foundation only): keys sorted byte by byte, slashes unescaped, two spaces of indent and `" : "`.
package enum JSONTree {
    /// JSON's `null`.
    package struct Null: Equatable, Sendable {}

    /// A number that is not a 64-bit integer (`0.5`, `1e3`, `18446744073709551616`), as written.
    package struct Number: Equatable, Sendable {
        package let literal: String
    }

    /// The tree of a JSON text; throws the parser's failure (its path and reason).
    package static func parse(_ bytes: [UInt8]) throws -> Any {
        plain(try JSONDocument(parsing: bytes).root)
    }

    /// The tree of one parsed value.
    package static func plain(_ value: JSONValue) -> Any {
        switch value.kind {
        case .null: return Null()
        case .boolean: return value.boolean ?? false
        case .string: return value.string ?? ""
        case .number:
            let (literal, isInteger) = value.number!
            if isInteger, let integer = Int(literal) { return integer }
            return Number(literal: literal)
        case .array: return (value.array ?? []).map(plain)
        case .object:
            var object = [String: Any]()
            for (key, member) in value.object?.members ?? [] { object[key] = plain(member) }
            return object
        }
    }

    /// The JSON text of a tree, pretty (indented, one member a line) or on one line. A value of any
    /// other type is a programming error.
    package static func encode(_ value: Any, pretty: Bool) -> [UInt8] {
        var out = [UInt8]()
        write(value, to: &out, pretty: pretty, depth: 0)
        return out
    }

    private static func write(_ value: Any, to out: inout [UInt8], pretty: Bool, depth: Int) {
        func newline(_ depth: Int) {
            guard pretty else { return }
            out.append(0x0a)
            out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
        }
        switch value {
        case let text as String: writeString(text, to: &out)
        case let flag as Bool: out.append(contentsOf: (flag ? "true" : "false").utf8)
        case let integer as Int: out.append(contentsOf: String(integer).utf8)
        case let integer as Int64: out.append(contentsOf: String(integer).utf8)
        case let number as Double: out.append(contentsOf: format(number).utf8)
        case let number as Number: out.append(contentsOf: number.literal.utf8)
        case is Null: out.append(contentsOf: "null".utf8)
        case let list as [Any]:
            guard !list.isEmpty else { return out.append(contentsOf: "[]".utf8) }
            out.append(UInt8(ascii: "["))
            for (index, item) in list.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                write(item, to: &out, pretty: pretty, depth: depth + 1)
            }
            newline(depth)
            out.append(UInt8(ascii: "]"))
        case let object as [String: Any]:
            guard !object.isEmpty else { return out.append(contentsOf: "{}".utf8) }
            out.append(UInt8(ascii: "{"))
            for (index, key) in object.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                writeString(key, to: &out)
                out.append(contentsOf: (pretty ? " : " : ":").utf8)
                write(object[key]!, to: &out, pretty: pretty, depth: depth + 1)
            }
            newline(depth)
            out.append(UInt8(ascii: "}"))
        default:
            preconditionFailure("JSONTree cannot write a \(type(of: value))")
        }
    }

    /// An integral double as an integer (`30`, as JSONSerialization writes it), any other as Swift prints it.
    private static func format(_ number: Double) -> String {
        if number.rounded() == number, abs(number) < 9_007_199_254_740_992 { return String(Int64(number)) }
        return number.isFinite ? "\(number)" : "null"
    }

    private static func writeString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x0a: out.append(contentsOf: #"\n"#.utf8)
            case 0x0d: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0c: out.append(contentsOf: #"\f"#.utf8)
            case 0..<0x20:
                let hex = String(byte, radix: 16)
                out.append(contentsOf: ("\\u00" + (hex.count == 1 ? "0" : "") + hex).utf8)
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
