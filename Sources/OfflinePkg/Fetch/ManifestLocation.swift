import FoundationEssentials

/// Turns what a user typed as a manifest location into a URL: http, https and file URLs as they are,
/// anything else as a file path.
public enum ManifestLocation {
    public static func url(from text: String) throws -> URL {
        let lower = text.lowercased()
        if lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://") {
            guard let url = URL(string: text), url.host != nil || url.isFileURL else {
                throw OfflinePkgError.invalidArgument("not a valid manifest URL: \(text)")
            }
            return url
        }
        if lower.contains("://") {
            throw OfflinePkgError.invalidArgument("unsupported manifest URL scheme: \(text) (use http, https, file or a path)")
        }
        return URL(fileURLWithPath: text).standardizedFileURL
    }

    /// An archive or delta URL of the manifest, resolved against the manifest's own URL.
    package static func resolve(_ reference: String, against manifest: URL) throws -> URL {
        guard let url = URL(string: reference, relativeTo: manifest)?.absoluteURL,
            ["http", "https", "file"].contains(url.scheme?.lowercased() ?? "")
        else {
            throw OfflinePkgError.invalidManifest(
                source: manifest.absoluteString, field: "url", reason: "\"\(reference)\" is not an http, https or file URL")
        }
        // A remote manifest must never make the device read its own files (file:///etc/shadow).
        if url.isFileURL && !manifest.isFileURL {
            throw OfflinePkgError.invalidManifest(
                source: manifest.absoluteString, field: "url",
                reason: "\"\(reference)\" is a file URL, which only a file manifest may use")
        }
        return url
    }
}
