import Foundation

/// Shared JSON settings for the files offlinepkg writes into a cache root.
package enum JSONCoding {
    package static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    /// Reads one of the cache root's JSON files; nil when it does not exist yet.
    package static func load<T: Decodable>(_ type: T.Type, from path: String) throws -> T? {
        guard FileSystem.exists(path) else { return nil }
        let bytes = try FileSystem.read(path)
        do {
            return try decoder.decode(type, from: Data(bytes))
        } catch {
            throw OfflinePkgError.corruptState(path: path, reason: "\(error)")
        }
    }

    package static func encode(_ value: some Encodable, pretty: Bool = true) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting =
            pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        // Encoding our own plain structs cannot fail; a failure here is a programming error.
        return Array(try! encoder.encode(value))
    }
}
