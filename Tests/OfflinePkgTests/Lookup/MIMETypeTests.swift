import Foundation
import Testing

@testable import OfflinePkg

/// docs/protocol.md#lookups: a lookup's MIME type comes from the file's extension, with `charset=utf-8` on text types.
/// The expected types are written here from the registrations (IANA, and the RFC or specification
/// behind each), not copied from the code's table. Where the registry leaves room (a type registered
/// under two names, or none at all), every standard spelling is accepted and the comment says why.
@Suite("MIME types")
struct MIMETypeTests {
    /// Extension → the types a standard gives it (lowercase, without parameters).
    static let standard: [String: Set<String>] = [
        // Documents and code.
        "html": ["text/html"], "htm": ["text/html"],  // IANA text/html (WHATWG HTML)
        "xhtml": ["application/xhtml+xml"],  // RFC 3236
        "js": ["text/javascript"], "mjs": ["text/javascript"],  // RFC 9239
        "cjs": ["text/javascript"],  // RFC 9239: JavaScript is text/javascript (.cjs: Node's CommonJS modules)
        "css": ["text/css"],  // RFC 2318
        "json": ["application/json"],  // RFC 8259
        "map": ["application/json"],  // source maps (ECMA-426) are JSON documents
        "webmanifest": ["application/manifest+json"],  // IANA, W3C Web Application Manifest
        "txt": ["text/plain"],  // RFC 2046
        "md": ["text/markdown"],  // RFC 7763
        "csv": ["text/csv"],  // RFC 4180
        "xml": ["application/xml", "text/xml"],  // RFC 7303 registers both
        "vtt": ["text/vtt"],  // IANA, W3C WebVTT
        "appcache": ["text/cache-manifest"],  // IANA, WHATWG HTML
        // IANA ties no web type to .ts; video/mp2t is the registered type of MPEG-2 transport streams
        // (RFC 3555), the .ts segments of HLS video, and what nginx's and Apache's mime.types give it.
        "ts": ["video/mp2t"],
        // IANA registers application/vnd.apple.mpegurl for HLS playlists (RFC 8216 §4).
        "m3u8": ["application/vnd.apple.mpegurl"],
        // Images.
        "svg": ["image/svg+xml"],  // IANA, W3C SVG
        "png": ["image/png"],  // IANA, RFC 2083
        "apng": ["image/apng", "image/png"],  // IANA image/apng (2022); W3C PNG 3rd edition: an APNG is a PNG
        "jpg": ["image/jpeg"], "jpeg": ["image/jpeg"],  // RFC 2046
        "gif": ["image/gif"],  // RFC 2046
        "webp": ["image/webp"],  // RFC 9649
        "avif": ["image/avif"],  // IANA, AOM AVIF
        "ico": ["image/vnd.microsoft.icon", "image/x-icon"],  // IANA; WHATWG MIME Sniffing uses image/x-icon
        "bmp": ["image/bmp"],  // IANA
        "tif": ["image/tiff"], "tiff": ["image/tiff"],  // RFC 3302
        // Fonts.
        "woff": ["font/woff"], "woff2": ["font/woff2"], "ttf": ["font/ttf"], "otf": ["font/otf"],  // RFC 8081
        "eot": ["application/vnd.ms-fontobject"],  // IANA
        // Other binaries.
        "wasm": ["application/wasm"],  // IANA, W3C WebAssembly
        "pdf": ["application/pdf"],  // RFC 8118
        "zip": ["application/zip"],  // IANA
        // Video and audio.
        "mp4": ["video/mp4"], "m4a": ["audio/mp4"],  // RFC 4337
        "webm": ["video/webm"],  // the WebM project's container specification
        "ogv": ["video/ogg"], "ogg": ["audio/ogg"], "oga": ["audio/ogg"],  // RFC 5334
        // IANA's audio/ogg lists .opus (RFC 7845 §9); audio/opus (RFC 7587) is only defined for RTP.
        "opus": ["audio/ogg"],
        "mov": ["video/quicktime"],  // IANA
        "mp3": ["audio/mpeg"],  // RFC 3003
        "aac": ["audio/aac"],  // IANA
        "flac": ["audio/flac"],  // RFC 9639
        // IANA: audio/vnd.wave (RFC 2361); WHATWG MIME Sniffing: audio/wave; audio/wav and audio/x-wav
        // are the unregistered names every browser also takes.
        "wav": ["audio/vnd.wave", "audio/wave", "audio/wav", "audio/x-wav"],
    ]

    /// Text types carry a charset: text/*, and the JSON and XML types (`+json`, `+xml` included).
    static func isText(_ type: String) -> Bool {
        type.hasPrefix("text/") || ["application/json", "application/xml"].contains(type) || type.hasSuffix("+json")
            || type.hasSuffix("+xml")
    }

    @Test(arguments: standard.keys.sorted())
    func anExtensionMapsToItsStandardType(_ ext: String) {
        // A dotted folder and a dotted name: only the last extension of the name counts.
        let type = MIMETypes.type(forPath: "/root/trees/site/1.0-abc/assets.v2/app.min.\(ext)")
        let parts = type.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        let base = parts[0]
        #expect(Self.standard[ext]!.contains(base), "\(ext) maps to \(type)")
        #expect(Array(parts.dropFirst()) == (Self.isText(base) ? ["charset=utf-8"] : []), "\(ext) maps to \(type)")
        // Extensions compare case-insensitively.
        #expect(MIMETypes.type(forPath: "/root/FILE.\(ext.uppercased())") == type)
    }

    @Test func everyExtensionOfTheCodeIsJudgedHere() {
        let unjudged = MIMETypes.extensions.subtracting(Self.standard.keys)
        #expect(unjudged.isEmpty, "add these to the table above with their registered types: \(unjudged.sorted())")
    }

    /// RFC 2046 §4.5.1: arbitrary data of no known type is application/octet-stream.
    @Test(arguments: [
        "/t/file.unknownext", "/t/README", "/t/site.v2/LICENSE", "/t/archive.", "/t/.htaccess", "/t/bundle.tar.gz",
        "/t/page.html5", "/t/index.html.bak",
    ])
    func anUnknownOrMissingExtensionIsOctetStream(_ path: String) {
        #expect(MIMETypes.type(forPath: path) == "application/octet-stream")
    }
}
