import Foundation

/// The answer to a lookup: a file of an active tree and what a response for it needs.
public struct Resource: Sendable, Equatable {
    /// The file on disk, inside an installed, read-only tree.
    public let fileURL: URL
    /// The same file as a path, for callers that open it directly.
    public let path: String
    /// MIME type from the file's extension, with `charset=utf-8` on text types.
    public let mimeType: String
    public let size: Int64
    public let packageID: String
    public let version: String
    /// A strong ETag (quoted), stable for this file of this release: derived from its sha256.
    public let etag: String
    /// The file's sha256 (hex), as installed and verified.
    public let sha256: String

    package init(path: String, size: Int64, sha256: String, packageID: String, version: String) {
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
