/// A JSON text (RFC 8259) read one way only, for documents that are signed: the manifest.
///
/// Foundation's readers keep the last of two equal keys without a word, turn `1.0000000000000000001`
/// into a double, and recurse once per nesting level. This reader refuses duplicate keys at any depth
/// (keys compared by their decoded bytes, not as `String`, which would merge Unicode normalisation
/// twins), keeps every number as its literal text so that an integer field can tell `1` from `1.0`,
/// refuses lone surrogates in `\u` escapes and invalid UTF-8, and parses with an explicit stack: depth
/// costs memory, never call stack, and is bounded by `maximumDepth`. Values live in flat arrays, so
/// releasing a deeply nested document does not recurse either.
package final class JSONDocument: Sendable {
    package enum Kind: UInt8, Sendable {
        case null, boolean, number, string, array, object
    }

    struct Node: Sendable {
        var kind: Kind
        /// The boolean's value; for a number, whether it is written as an integer (no fraction, no exponent).
        var flag: Bool
        /// A string's or number's index in `texts`; a container's first slot in `slots`.
        var first: Int32
        /// A container's element or member count.
        var count: Int32
    }

    /// Nesting deeper than this is refused. Far above any manifest (five levels) or anything a publisher
    /// would put in an unknown field, and low enough that a 16 MiB run of `[` costs little.
    package static let maximumDepth = 10_000

    let nodes: [Node]
    /// String values, object keys and number literals.
    let texts: [String]
    /// Array elements (node indices); object members as pairs (key index in `texts`, node index).
    let slots: [Int32]

    /// The top-level value.
    package var root: JSONValue { JSONValue(document: self, index: nodes.count - 1) }

    /// Parses `bytes`; throws `JSONDocument.Failure` naming where the text goes wrong.
    package init(parsing bytes: [UInt8]) throws(Failure) {
        var parser = JSONParser(bytes)
        try parser.parse()
        nodes = parser.nodes
        texts = parser.texts
        slots = parser.slots
    }

    /// Why a text was refused, and where.
    package struct Failure: Error, Sendable, Equatable {
        /// The path of the value being read, as `packages[0].archive`; empty at the top level.
        package var path: String
        /// What is wrong, e.g. `duplicate key "version"`.
        package var reason: String
    }
}

/// One value of a `JSONDocument`.
package struct JSONValue: Sendable {
    let document: JSONDocument
    let index: Int

    private var node: JSONDocument.Node { document.nodes[index] }

    package var kind: JSONDocument.Kind { node.kind }
    package var isNull: Bool { node.kind == .null }
    package var boolean: Bool? { node.kind == .boolean ? node.flag : nil }
    package var string: String? { node.kind == .string ? document.texts[Int(node.first)] : nil }

    /// A number as written in the text, and whether it is written as an integer.
    package var number: (literal: String, isInteger: Bool)? {
        node.kind == .number ? (document.texts[Int(node.first)], node.flag) : nil
    }

    package var array: [JSONValue]? {
        guard node.kind == .array else { return nil }
        let first = Int(node.first)
        return document.slots[first..<first + Int(node.count)].map { JSONValue(document: document, index: Int($0)) }
    }

    package var object: JSONObject? { node.kind == .object ? JSONObject(document: document, index: index) : nil }
}

/// An object of a `JSONDocument`; its keys are unique (the parser refuses duplicates).
package struct JSONObject: Sendable {
    let document: JSONDocument
    let index: Int

    /// The members in document order.
    package var members: [(key: String, value: JSONValue)] {
        let node = document.nodes[index]
        let first = Int(node.first)
        return (0..<Int(node.count)).map { member in
            let slot = first + 2 * member
            return (document.texts[Int(document.slots[slot])], JSONValue(document: document, index: Int(document.slots[slot + 1])))
        }
    }

    /// The value of `key`, matched byte for byte; nil when absent.
    package subscript(key: String) -> JSONValue? {
        let node = document.nodes[index]
        let first = Int(node.first)
        for member in 0..<Int(node.count) {
            let slot = first + 2 * member
            if document.texts[Int(document.slots[slot])].utf8.elementsEqual(key.utf8) {
                return JSONValue(document: document, index: Int(document.slots[slot + 1]))
            }
        }
        return nil
    }
}

/// A parsed value written back as JSON (a command's `--json` output that embeds a document it read,
/// such as `history`'s package entries): as an object, list, string... rather than as the text of one.
extension JSONValue: Encodable {
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    package func encode(to encoder: any Encoder) throws {
        switch kind {
        case .object:
            var container = encoder.container(keyedBy: Key.self)
            for (key, value) in object!.members { try container.encode(value, forKey: Key(stringValue: key)) }
        case .array:
            var container = encoder.unkeyedContainer()
            for value in array! { try container.encode(value) }
        default:
            var container = encoder.singleValueContainer()
            switch kind {
            case .null: try container.encodeNil()
            case .boolean: try container.encode(boolean!)
            case .string: try container.encode(string!)
            default:
                let (literal, isInteger) = number!
                if isInteger, let integer = Int(literal) { try container.encode(integer) } else { try container.encode(Double(literal) ?? 0) }
            }
        }
    }
}
