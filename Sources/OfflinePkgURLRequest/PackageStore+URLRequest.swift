// The URL hook's `URLRequest` form, in its own product: `URLRequest` is FoundationNetworking's on Linux,
// and FoundationNetworking brings the whole of Foundation (ICU's data, libcurl through URLSession) into
// whatever links it. The device library and the CLI stay on FoundationEssentials; a host that already
// holds `URLRequest`s (a WKURLSchemeHandler, a Foundation app) adds this product and keeps the call.
import Foundation
import OfflinePkg

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension PackageStore {
    /// `cachedResponse(url:method:headers:body:)` for a `URLRequest`: its URL, method (GET when
    /// unset), header fields (sorted by name) and `httpBody`. Nil for a request without a URL.
    public func cachedResponse(for request: URLRequest) async throws -> CachedResponse? {
        guard let url = request.url?.absoluteString else { return nil }
        let fields = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
        return try await cachedResponse(url: url, method: request.httpMethod ?? "GET", headers: fields, body: request.httpBody)
    }
}
