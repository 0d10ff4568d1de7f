import FoundationEssentials

/// A cache-root file type read without `JSONDecoder` when the text is what `JSONCoding.encode` writes.
///
/// `JSONDecoder`'s first use in a process instantiates generic metadata for every container and
/// `CodingKeys` type it meets and checks their conformances by scanning the binary's conformance
/// records: a few million instructions, most of a no-op sync beside process start and the transfer.
/// The root's small files are read instead with `JSONDocument` and these field readers, which accept
/// only what the encoder writes: every key known, each value of its type, dates as `InternetDate`.
/// Anything else (a key a newer build added, a date another tool wrote, a damaged file) throws
/// `StateFields.Unexpected`, and `JSONCoding.load` reads the file with `JSONDecoder` as before, so
/// what is read, and every error, stays `JSONDecoder`'s.
package protocol StateFileReadable: Decodable {
    /// Every key the type's `Codable` form writes; a key outside them sends the file to `JSONDecoder`.
    static var stateKeys: Set<String> { get }
    init(stateFields fields: StateFields) throws
}

/// An object of a cache-root file whose keys are all known to the type being read.
package struct StateFields {
    /// The text is not what the encoder writes for the type: `JSONDecoder` is left to read it.
    package struct Unexpected: Error {}

    private let object: JSONObject

    package init(_ value: JSONValue, keys: Set<String>) throws {
        guard let object = value.object, object.members.allSatisfy({ keys.contains($0.key) }) else { throw Unexpected() }
        self.object = object
    }

    /// The value of `key`: missing or null is nil, as `decodeIfPresent` has it.
    package func optional<T>(_ key: String, _ read: (JSONValue) throws -> T) throws -> T? {
        guard let value = object[key], !value.isNull else { return nil }
        return try read(value)
    }

    /// The value of `key`, which must be there and not null, as `decode` has it.
    package func required<T>(_ key: String, _ read: (JSONValue) throws -> T) throws -> T {
        guard let value = try optional(key, read) else { throw Unexpected() }
        return value
    }
}

/// The value readers of `StateFields`, one per type the root's files hold.
package enum StateValue {
    package static func string(_ value: JSONValue) throws -> String {
        guard let string = value.string else { throw StateFields.Unexpected() }
        return string
    }

    package static func bool(_ value: JSONValue) throws -> Bool {
        guard let bool = value.boolean else { throw StateFields.Unexpected() }
        return bool
    }

    /// An integer as the encoder writes one: digits only, within 64 bits.
    package static func int(_ value: JSONValue) throws -> Int {
        guard let (literal, isInteger) = value.number, isInteger, let int = Int(literal) else {
            throw StateFields.Unexpected()
        }
        return int
    }

    package static func int64(_ value: JSONValue) throws -> Int64 { Int64(try int(value)) }

    package static func int32(_ value: JSONValue) throws -> Int32 {
        guard let int = Int32(exactly: try int(value)) else { throw StateFields.Unexpected() }
        return int
    }

    /// A double as the encoder writes one; non-finite values are never written.
    package static func double(_ value: JSONValue) throws -> Double {
        guard let (literal, _) = value.number, let double = Double(literal), double.isFinite else {
            throw StateFields.Unexpected()
        }
        return double
    }

    /// A date in the one form `JSONCoding.encode` writes (`InternetDate`).
    package static func date(_ value: JSONValue) throws -> Date {
        guard let text = value.string, let date = InternetDate.parse(text) else { throw StateFields.Unexpected() }
        return date
    }

    package static func raw<T: RawRepresentable<String>>(_ value: JSONValue) throws -> T {
        guard let text = value.string, let raw = T(rawValue: text) else { throw StateFields.Unexpected() }
        return raw
    }

    package static func object<T: StateFileReadable>(_ value: JSONValue) throws -> T {
        try T(stateFields: StateFields(value, keys: T.stateKeys))
    }

    package static func array<T>(_ value: JSONValue, _ element: (JSONValue) throws -> T) throws -> [T] {
        guard let array = value.array else { throw StateFields.Unexpected() }
        return try array.map(element)
    }

    package static func dictionary<T>(_ value: JSONValue, _ element: (JSONValue) throws -> T) throws -> [String: T] {
        guard let object = value.object else { throw StateFields.Unexpected() }
        var dictionary = [String: T](minimumCapacity: object.members.count)
        // The parser refuses duplicate keys, compared as bytes; `String` equality could still merge two
        // (Unicode canonical equivalence), where `JSONDecoder` would keep one: left to it.
        for (key, member) in object.members {
            guard dictionary.updateValue(try element(member), forKey: key) == nil else { throw StateFields.Unexpected() }
        }
        return dictionary
    }
}

extension JSONCoding {
    /// Reads one of the cache root's JSON files with its `StateFileReadable` reader, and with
    /// `JSONDecoder` when that reader finds anything but what `encode` writes; nil when it does not exist.
    package static func load<T: StateFileReadable>(_ type: T.Type, from path: String) throws -> T? {
        try load(type, from: path) { try StateValue.object($0) }
    }

    /// Reads one of the cache root's JSON files with `read` (`StateValue`'s readers), and with
    /// `JSONDecoder` when `read` throws; nil when it does not exist.
    package static func load<T: Decodable>(_ type: T.Type, from path: String, reading read: (JSONValue) throws -> T)
        throws -> T?
    {
        guard FileSystem.exists(path) else { return nil }
        let bytes = try FileSystem.read(path)
        if let document = try? JSONDocument(parsing: bytes), let value = try? read(document.root) { return value }
        return try decode(type, from: bytes, path: path)
    }
}
