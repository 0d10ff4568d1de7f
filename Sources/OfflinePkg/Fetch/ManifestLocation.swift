import Foundation

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

    /// `url` as text without its userinfo (`https://reader:secret@repo.example.com/` as
    /// `https://repo.example.com/`): what a root keeps, reports and prints of a URL (SPEC §15), so no
    /// password sits in `state.json` or a log. The transfer itself still sends it.
    package static func withoutUserinfo(_ url: URL) -> String {
        guard url.user != nil || url.password != nil, var components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        else { return url.absoluteString }
        components.user = nil
        components.password = nil
        return components.string ?? url.absoluteString
    }

    /// The same for URL text (a state written before userinfo was left out); text that is not a URL as it is.
    package static func withoutUserinfo(_ text: String) -> String {
        guard text.contains("@"), let url = URL(string: text) else { return text }
        return withoutUserinfo(url)
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
