import FoundationEssentials
import Synchronization

/// Fetches the manifest (conditionally) and its signature, each into memory under a size cap and
/// within a deadline.
package struct ManifestFetcher: Sendable {
    package var transport: any Transport
    package var retry: RetryPolicy
    package var limits: RetrievalLimits
    /// How long the manifest, and then the signature, may take each, every attempt included.
    package var deadline: TimeInterval
    package var caBundle: String? = nil

    /// A manifest response: new bytes, or "not modified" with the stored copy standing.
    package enum Response: Sendable {
        case notModified
        case fetched(bytes: [UInt8], etag: String?, lastModified: String?)
    }

    /// `uncached` asks every cache on the way for a fresh copy (`Cache-Control: no-cache`): the second
    /// try after a manifest that looked stale (docs/protocol.md#checking-the-manifest). `onHead` is told
    /// each answer's head as soon as it arrives, before its body.
    package func fetchManifest(
        _ url: URL, etag: String?, lastModified: String?, uncached: Bool = false,
        onHead: (@Sendable (TransferResponseHead) -> Void)? = nil
    ) async throws -> Response {
        var headers = uncached ? Self.noCacheHeaders : []
        if let etag { headers.append(("If-None-Match", etag)) }
        if let lastModified { headers.append(("If-Modified-Since", lastModified)) }
        let (head, bytes) = try await get(
            url, headers: headers, limit: Manifest.maximumSize, what: "manifest", onHead: onHead)
        if head.status == 304 { return .notModified }
        return .fetched(bytes: bytes, etag: head.headers["etag"], lastModified: head.headers["last-modified"])
    }

    /// The `.minisig` beside the manifest; nil when the server has none (404, or no such file).
    package func fetchSignature(_ manifestURL: URL, uncached: Bool = false) async throws -> [UInt8]? {
        try await fetchSignature(at: Self.signatureURL(of: manifestURL), uncached: uncached)
    }

    /// The signature at `url` (`.minisig` beside the manifest, or a copy under `signatures/`); nil when
    /// the server has none.
    package func fetchSignature(at url: URL, uncached: Bool = false) async throws -> [UInt8]? {
        try await fetchSmallFile(at: url, what: "signature", uncached: uncached)
    }

    /// A file of at most 64 KiB (a signature, a keys document) at `url`; nil when the server has none.
    /// `what` names it in a size refusal.
    package func fetchSmallFile(at url: URL, what: String, uncached: Bool = false) async throws -> [UInt8]? {
        do {
            return try await get(url, headers: uncached ? Self.noCacheHeaders : [], limit: 64 << 10, what: what).1
        } catch OfflinePkgError.transfer(_, .notFound) {
            return nil
        }
    }

    /// `<manifest-url>.minisig`, with `.minisig` on the path: a signed CDN URL keeps its query
    /// (`…/manifest.json.minisig?token=…`, not `…?token=….minisig`).
    package static func signatureURL(of manifestURL: URL) -> URL {
        guard var components = URLComponents(url: manifestURL, resolvingAgainstBaseURL: true) else {
            return URL(string: manifestURL.absoluteString + ".minisig")!
        }
        components.fragment = nil
        components.percentEncodedPath += ".minisig"
        return components.url ?? URL(string: manifestURL.absoluteString + ".minisig")!
    }

    /// `signatures/<sha256 of the manifest>.minisig` beside the manifest: the copy `publish` writes under
    /// a name no edge can hold stale, since it names the manifest bytes it signs.
    package static func immutableSignatureURL(of manifestURL: URL, manifestSHA256: String) -> URL {
        sibling("signatures/\(manifestSHA256).minisig", of: manifestURL)
    }

    /// `signatures/<sha256 of the manifest>.<KEYID>.minisig` beside the manifest: one signature of a
    /// threshold of manifest keys (docs/protocol.md#keys-documents), one file per key.
    package static func keySignatureURL(of manifestURL: URL, manifestSHA256: String, keyID: String) -> URL {
        sibling("signatures/\(manifestSHA256).\(keyID).minisig", of: manifestURL)
    }

    /// `keys/<version>.json` beside the manifest (docs/protocol.md#keys-documents).
    package static func keysDocumentURL(of manifestURL: URL, version: Int) -> URL {
        sibling("keys/\(version).json", of: manifestURL)
    }

    /// `keys/<version>.json.<KEYID>.minisig`: one root key's signature of a keys document.
    package static func keysSignatureURL(of manifestURL: URL, version: Int, keyID: String) -> URL {
        sibling("keys/\(version).json.\(keyID).minisig", of: manifestURL)
    }

    /// A file at `path` (relative, no `..`) in the manifest's folder.
    private static func sibling(_ path: String, of manifestURL: URL) -> URL {
        URL(string: path, relativeTo: manifestURL)?.absoluteURL
            ?? manifestURL.deletingLastPathComponent().appendingPathComponent(path)
    }

    private static let noCacheHeaders = [("Cache-Control", "no-cache"), ("Pragma", "no-cache")]

    private func get(
        _ url: URL, headers: [(String, String)], limit: Int, what: String,
        onHead: (@Sendable (TransferResponseHead) -> Void)? = nil
    ) async throws -> (TransferResponseHead, [UInt8]) {
        let urlText = url.absoluteString
        let deadline = TransferDeadline(what: what, seconds: self.deadline)
        return try await retry.run { _ in
            // A backoff may have used up what was left: no attempt starts past the deadline.
            if deadline.hasPassed { throw OfflinePkgError.slowRetrieval(url: urlText, protection: deadline.protection) }
            let body = Mutex<[UInt8]>([])
            let head = try await transport.get(
                TransferRequest(url: url, headers: headers, limits: limits, deadline: deadline, caBundle: caBundle)
            ) { head in
                onHead?(head)
                if !head.isSuccess && head.status != 304 { throw OfflinePkgError.transfer(url: urlText, failure: head.failure) }
            } onBody: { buffer in
                try body.withLock { bytes in
                    guard bytes.count + buffer.count <= limit else {
                        throw OfflinePkgError.sizeMismatch(what: "\(what) \(urlText)", reason: "larger than \(limit) bytes")
                    }
                    bytes.append(contentsOf: buffer)
                }
            }
            return (head, body.withLock { $0 })
        }
    }
}
