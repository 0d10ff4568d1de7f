import FoundationEssentials

/// The answer to a lookup: a file of an active tree and what a response for it needs.
///
/// A value type over one shared, immutable storage object: handing a `Resource` out of `resolve` costs
/// one reference count, not one per string field — that is a third of a resolve's budget otherwise.
public struct Resource: Sendable, Equatable {
    private final class Storage: Sendable {
        let fileURL: URL
        let path: String
        let mimeType: String
        let size: Int64
        let packageID: String
        let version: String
        let etag: String
        let sha256: String

        init(path: String, size: Int64, sha256: String, packageID: String, version: String) {
            self.path = path
            self.fileURL = URL(fileURLWithPath: path, isDirectory: false)
            self.mimeType = MIMETypes.type(forPath: path)
            self.size = size
            self.packageID = packageID
            self.version = version
            self.etag = "\"" + sha256.prefix(32) + "\""
            self.sha256 = sha256
        }
    }

    private let storage: Storage

    /// The file on disk, inside an installed, read-only tree.
    public var fileURL: URL { storage.fileURL }
    /// The same file as a path, for callers that open it directly.
    public var path: String { storage.path }
    /// MIME type from the file's extension, with `charset=utf-8` on text types.
    public var mimeType: String { storage.mimeType }
    public var size: Int64 { storage.size }
    public var packageID: String { storage.packageID }
    public var version: String { storage.version }
    /// A strong ETag (quoted), stable for this file of this release: derived from its sha256.
    public var etag: String { storage.etag }
    /// The file's sha256 (hex), as installed and verified.
    public var sha256: String { storage.sha256 }

    package init(path: String, size: Int64, sha256: String, packageID: String, version: String) {
        storage = Storage(path: path, size: size, sha256: sha256, packageID: packageID, version: version)
    }

    /// The storage as a pointer that holds no reference, for a slot whose owner keeps the `Resource`
    /// alive (`LookupIndex`'s answer slots); `init(unretained:)` makes the `Resource` again.
    package var unretained: UnsafeMutableRawPointer { Unmanaged.passUnretained(storage).toOpaque() }

    package init(unretained pointer: UnsafeMutableRawPointer) {
        storage = Unmanaged<Storage>.fromOpaque(pointer).takeUnretainedValue()
    }

    private enum CodingKeys: String, CodingKey {
        case path, mimeType, size, packageID, version, etag, sha256
    }

    public static func == (lhs: Resource, rhs: Resource) -> Bool {
        lhs.storage === rhs.storage
            || (lhs.path == rhs.path && lhs.sha256 == rhs.sha256 && lhs.size == rhs.size
                && lhs.packageID == rhs.packageID && lhs.version == rhs.version)
    }
}

/// A lookup's answer as JSON (`lookup --json`, or a host's own logs): every field a response needs.
extension Resource: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(path, forKey: .path)
        try container.encode(mimeType, forKey: .mimeType)
        try container.encode(size, forKey: .size)
        try container.encode(packageID, forKey: .packageID)
        try container.encode(version, forKey: .version)
        try container.encode(etag, forKey: .etag)
        try container.encode(sha256, forKey: .sha256)
    }
}
