/// MIME types for what web bundles ship, keyed by lowercase extension. Text types carry
/// `charset=utf-8`, since bundlers emit UTF-8 and a webview guessing otherwise garbles pages.
package enum MIMETypes {
    package static let fallback = "application/octet-stream"

    private static let table: [String: String] = [
        "html": "text/html; charset=utf-8", "htm": "text/html; charset=utf-8",
        "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8",
        "cjs": "text/javascript; charset=utf-8",
        "css": "text/css; charset=utf-8", "json": "application/json; charset=utf-8",
        "map": "application/json; charset=utf-8", "webmanifest": "application/manifest+json; charset=utf-8",
        "txt": "text/plain; charset=utf-8", "md": "text/markdown; charset=utf-8",
        "csv": "text/csv; charset=utf-8", "xml": "application/xml; charset=utf-8",
        "svg": "image/svg+xml; charset=utf-8", "xhtml": "application/xhtml+xml; charset=utf-8",
        "vtt": "text/vtt; charset=utf-8",
        "appcache": "text/cache-manifest; charset=utf-8",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif",
        "webp": "image/webp", "avif": "image/avif", "ico": "image/x-icon", "bmp": "image/bmp",
        "apng": "image/apng", "tif": "image/tiff", "tiff": "image/tiff",
        "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf", "otf": "font/otf",
        "eot": "application/vnd.ms-fontobject",
        "wasm": "application/wasm", "pdf": "application/pdf", "zip": "application/zip",
        "mp4": "video/mp4", "webm": "video/webm", "ogv": "video/ogg", "mov": "video/quicktime",
        // An HLS segment, as nginx and Apache serve it; a bundle never ships TypeScript to a webview.
        "ts": "video/mp2t", "m3u8": "application/vnd.apple.mpegurl",
        "mp3": "audio/mpeg", "ogg": "audio/ogg", "oga": "audio/ogg", "wav": "audio/wav",
        "m4a": "audio/mp4", "aac": "audio/aac", "flac": "audio/flac", "opus": "audio/ogg",
    ]

    /// Every extension with a type of its own: the test that holds this table to the registrations
    /// checks that it knows each one.
    package static var extensions: Set<String> { Set(table.keys) }

    package static func type(forPath path: String) -> String {
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return fallback }
        return table[path[path.index(after: dot)...].lowercased()] ?? fallback
    }
}
