/// The reader behind `JSONDocument`: one pass over the bytes with an explicit stack of open containers.
///
/// A value is finished either at once (a scalar) or when its container closes; it is then attached to
/// the container below it. Children wait in `pending` until their container closes and are then moved
/// to `slots` in one contiguous run, so each container is a (first, count) range.
struct JSONParser {
    private let bytes: [UInt8]
    private var position = 0
    private(set) var nodes = [JSONDocument.Node]()
    private(set) var texts = [String]()
    private(set) var slots = [Int32]()

    private struct Frame {
        var isObject: Bool
        /// Where this container's children start in `pending`.
        var pendingStart: Int
        var count = 0
        /// For objects of more than `linearKeyLimit` members: the keys seen so far, as decoded bytes.
        var keys: Set<[UInt8]>? = nil
        /// For objects: the key whose value is being read, once one is.
        var currentKey = ""
        var hasKey = false
    }

    private var stack = [Frame]()
    private var pending = [Int32]()

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    typealias Failure = JSONDocument.Failure

    mutating func parse() throws(Failure) {
        skipWhitespace()
        while true {
            // Read one value; containers that open here loop back for their first child.
            guard position < bytes.count else { throw syntax("unexpected end of text, expected a value") }
            var finished: Int32
            switch bytes[position] {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard stack.count < JSONDocument.maximumDepth else {
                    throw Failure(path: path, reason: "nested deeper than \(JSONDocument.maximumDepth) levels")
                }
                let isObject = bytes[position] == UInt8(ascii: "{")
                stack.append(Frame(isObject: isObject, pendingStart: pending.count))
                position += 1
                skipWhitespace()
                if position < bytes.count && bytes[position] == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    position += 1
                    finished = closeContainer()
                } else {
                    if isObject { try readKey() }
                    continue
                }
            case UInt8(ascii: "\""):
                finished = append(.string, first: try readString())
            case UInt8(ascii: "t"):
                try expectLiteral("true")
                finished = append(.boolean, flag: true)
            case UInt8(ascii: "f"):
                try expectLiteral("false")
                finished = append(.boolean, flag: false)
            case UInt8(ascii: "n"):
                try expectLiteral("null")
                finished = append(.null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let (literal, isInteger) = try readNumber()
                finished = append(.number, flag: isInteger, first: literal)
            default:
                throw syntax("expected a value, got \(describe(bytes[position]))")
            }
            // Attach finished values to their containers, closing every container that ends here.
            while true {
                guard !stack.isEmpty else {
                    skipWhitespace()
                    guard position == bytes.count else {
                        throw syntax("unexpected \(describe(bytes[position])) after the end of the document")
                    }
                    return
                }
                pending.append(finished)
                stack[stack.count - 1].count += 1
                skipWhitespace()
                let isObject = stack[stack.count - 1].isObject
                guard position < bytes.count else {
                    throw syntax("unexpected end of text, expected \",\" or \"\(isObject ? "}" : "]")\"")
                }
                let byte = bytes[position]
                position += 1
                if byte == UInt8(ascii: ",") {
                    skipWhitespace()
                    if isObject { try readKey() }
                    break
                }
                guard byte == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) else {
                    position -= 1
                    throw syntax("expected \",\" or \"\(isObject ? "}" : "]")\", got \(describe(byte))")
                }
                finished = closeContainer()
            }
        }
    }

    /// Reads `"key" :` inside an object and refuses a key the object already has.
    private mutating func readKey() throws(Failure) {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else {
            throw syntax(position < bytes.count ? "expected a key string, got \(describe(bytes[position]))" : "unexpected end of text, expected a key")
        }
        let keyIndex = try readString()
        let key = texts[Int(keyIndex)]
        guard isNewKey(key) else {
            // RFC 8259 §4: with duplicate names "the behavior of software that receives such an object is
            // unpredictable". A signed document must read one way in every reader, so it is refused.
            throw Failure(path: path(includingCurrentMember: false), reason: "duplicate key \"\(OfflinePkgError.escaped(key))\"")
        }
        stack[stack.count - 1].currentKey = key
        stack[stack.count - 1].hasKey = true
        pending.append(keyIndex)
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else {
            throw syntax(position < bytes.count ? "expected \":\" after a key, got \(describe(bytes[position]))" : "unexpected end of text, expected \":\"")
        }
        position += 1
        skipWhitespace()
    }

    /// Up to this many members, a key is compared with each earlier one of its object (in `pending`,
    /// every other slot from the frame's start): no hashing, and no `Set<[UInt8]>`, whose first use in a
    /// process costs more than parsing a small document. Larger objects hash their keys.
    private static let linearKeyLimit = 16

    /// Whether `key` is not among the earlier keys of the object being read, compared by their bytes.
    private mutating func isNewKey(_ key: String) -> Bool {
        let top = stack.count - 1
        let (start, count) = (stack[top].pendingStart, stack[top].count)
        if count < Self.linearKeyLimit {
            for member in 0..<count where texts[Int(pending[start + 2 * member])].utf8.elementsEqual(key.utf8) {
                return false
            }
            return true
        }
        if stack[top].keys == nil {
            stack[top].keys = Set((0..<count).map { Array(texts[Int(pending[start + 2 * $0])].utf8) })
        }
        return stack[top].keys!.insert(Array(key.utf8)).inserted
    }

    private mutating func closeContainer() -> Int32 {
        let frame = stack.removeLast()
        let first = Int32(slots.count)
        slots.append(contentsOf: pending[frame.pendingStart...])
        pending.removeSubrange(frame.pendingStart...)
        return append(frame.isObject ? .object : .array, first: first, count: Int32(frame.count))
    }

    private mutating func append(_ kind: JSONDocument.Kind, flag: Bool = false, first: Int32 = 0, count: Int32 = 0) -> Int32 {
        nodes.append(JSONDocument.Node(kind: kind, flag: flag, first: first, count: count))
        return Int32(nodes.count - 1)
    }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0a, 0x0d: position += 1
            default: return
            }
        }
    }

    private mutating func expectLiteral(_ word: String) throws(Failure) {
        let expected = word.utf8
        guard position + expected.count <= bytes.count, bytes[position..<position + expected.count].elementsEqual(expected) else {
            throw syntax("expected a value, got \(describe(bytes[position]))")
        }
        position += expected.count
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, kept as written.
    private mutating func readNumber() throws(Failure) -> (Int32, Bool) {
        let start = position
        func digits(_ parser: inout JSONParser) -> Int {
            let from = parser.position
            while parser.position < parser.bytes.count, (0x30...0x39).contains(parser.bytes[parser.position]) { parser.position += 1 }
            return parser.position - from
        }
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        let integerStart = position
        guard digits(&self) > 0 else { throw syntax("expected a digit after \"-\"") }
        if bytes[integerStart] == UInt8(ascii: "0") && position - integerStart > 1 {
            throw syntax("a number may not start with 0 unless it is 0")
        }
        var isInteger = true
        if position < bytes.count && bytes[position] == UInt8(ascii: ".") {
            position += 1
            isInteger = false
            guard digits(&self) > 0 else { throw syntax("expected a digit after \".\"") }
        }
        if position < bytes.count && (bytes[position] | 0x20) == UInt8(ascii: "e") {
            position += 1
            isInteger = false
            if position < bytes.count && (bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-")) { position += 1 }
            guard digits(&self) > 0 else { throw syntax("expected a digit in the exponent") }
        }
        texts.append(String(decoding: bytes[start..<position], as: UTF8.self))
        return (Int32(texts.count - 1), isInteger)
    }

    /// Reads a string from its opening quote; returns its index in `texts`.
    private mutating func readString() throws(Failure) -> Int32 {
        let opening = position
        position += 1
        var decoded = [UInt8]()
        while true {
            guard position < bytes.count else {
                position = opening
                throw syntax("unterminated string")
            }
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                guard let text = String(validating: decoded, as: UTF8.self) else {
                    position = opening
                    throw syntax("string is not valid UTF-8")
                }
                texts.append(text)
                return Int32(texts.count - 1)
            case UInt8(ascii: "\\"):
                try readEscape(into: &decoded)
            case 0x00..<0x20:
                throw syntax("control byte 0x\(Hex.encode([byte])) inside a string (write it as \\u00\(Hex.encode([byte])))")
            default:
                decoded.append(byte)
                position += 1
            }
        }
    }

    private mutating func readEscape(into decoded: inout [UInt8]) throws(Failure) {
        guard position + 1 < bytes.count else { throw syntax("unterminated string") }
        let escape = bytes[position + 1]
        position += 2
        let simple: UInt8? =
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): escape
            case UInt8(ascii: "b"): 0x08
            case UInt8(ascii: "f"): 0x0c
            case UInt8(ascii: "n"): 0x0a
            case UInt8(ascii: "r"): 0x0d
            case UInt8(ascii: "t"): 0x09
            default: nil
            }
        if let simple {
            decoded.append(simple)
            return
        }
        guard escape == UInt8(ascii: "u") else {
            position -= 2
            throw syntax("invalid escape \"\\\(String(decoding: [escape], as: UTF8.self))\"")
        }
        var value = try readHex4()
        if (0xdc00...0xdfff).contains(value) {
            position -= 6
            throw syntax("lone low surrogate \\u\(Hex.encode([UInt8(value >> 8), UInt8(value & 0xff)]))")
        }
        if (0xd800...0xdbff).contains(value) {
            let high = value
            guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                position -= 6
                throw syntax("lone high surrogate \\u\(Hex.encode([UInt8(high >> 8), UInt8(high & 0xff)])) not followed by a low one")
            }
            position += 2
            let low = try readHex4()
            guard (0xdc00...0xdfff).contains(low) else {
                position -= 12
                throw syntax("lone high surrogate \\u\(Hex.encode([UInt8(high >> 8), UInt8(high & 0xff)])) not followed by a low one")
            }
            value = 0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
        }
        decoded.append(contentsOf: String(Character(Unicode.Scalar(value)!)).utf8)
    }

    private mutating func readHex4() throws(Failure) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard position < bytes.count, let digit = Hex.value(bytes[position]) else {
                throw syntax("expected 4 hex digits after \\u")
            }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    // MARK: Messages

    /// Where the parser stands, as `packages[0].archive`: the open containers and their current member.
    private var path: String { path(includingCurrentMember: true) }

    private func path(includingCurrentMember: Bool) -> String {
        var text = ""
        for (depth, frame) in stack.enumerated() {
            if !includingCurrentMember && depth == stack.count - 1 { break }
            if frame.isObject {
                if !frame.hasKey { break }
                text += (text.isEmpty ? "" : ".") + OfflinePkgError.escaped(frame.currentKey)
            } else {
                text += "[\(frame.count)]"
            }
        }
        return text
    }

    private func syntax(_ reason: String) -> Failure {
        var line = 1
        var column = 1
        for byte in bytes[..<min(position, bytes.count)] {
            if byte == 0x0a {
                line += 1
                column = 1
            } else if byte & 0xc0 != 0x80 {
                column += 1
            }
        }
        return Failure(path: path, reason: "not valid JSON: \(reason) at line \(line), column \(column)")
    }

    private func describe(_ byte: UInt8) -> String {
        (0x21...0x7e).contains(byte) ? "\"\(String(decoding: [byte], as: UTF8.self))\"" : "the byte 0x\(Hex.encode([byte]))"
    }
}
