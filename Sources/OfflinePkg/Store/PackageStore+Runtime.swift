import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension PackageStore {
    /// The runtime cache of this root, opened with `Options.runtime` at first use.
    public func runtimeCache() throws -> RuntimeCache {
        try runtimeCacheSlot.withLock { slot in
            if let cache = slot { return cache }
            let cache = try RuntimeCache(layout: layout, options: options.runtime)
            slot = cache
            return cache
        }
    }

    /// The answer for a URL hook (docs/protocol.md#the-runtime-cache): a package's file when one answers the URL, else the runtime
    /// cache's answer per the manifest's rule for it; nil when neither a package nor a rule covers it
    /// (the hook lets the request go on as it would without offlinepkg). Other methods than GET and
    /// HEAD on a rule's URLs go to the network unchanged, with `httpBody` as their body.
    public func cachedResponse(for request: URLRequest) async throws -> CachedResponse? {
        guard let url = request.url?.absoluteString else { return nil }
        let method = (request.httpMethod ?? "GET").uppercased()
        if method == "GET" || method == "HEAD", let resource = resolve(url) {
            return CachedResponse(
                status: 200,
                headers: [
                    ("Content-Type", resource.mimeType), ("ETag", resource.etag), ("Content-Length", String(resource.size)),
                ],
                body: .file(URL(fileURLWithPath: resource.path)), cacheStatus: "offlinepkg; hit; detail=package")
        }
        let cache = try runtimeCache()
        guard let route = cache.route(for: url) else { return nil }
        let fields = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
        var runtimeRequest = RuntimeRequest(url: url, method: method, fields: fields)
        if let body = request.httpBody {
            let reader = DataReader(body)
            runtimeRequest.body = { reader.read(into: $0) }
            runtimeRequest.bodyLength = Int64(body.count)
        }
        let answer = await cache.answer(runtimeRequest, route: route)
        let body: CachedResponse.Body
        switch answer.body {
        case .empty: body = .data(Data())
        case .data(let data): body = .data(data)
        case .stored(let path, _): body = .file(URL(fileURLWithPath: path))
        case .streamed(let stream):
            // Not stored: read once as it arrives, into memory (never onto the disk); nothing for a HEAD.
            if method == "HEAD" {
                stream.cancel()
                body = .data(Data())
            } else {
                body = .data(try await runBlocking { try stream.collect(limit: Int.max) })
            }
        }
        return CachedResponse(
            status: answer.status, headers: answer.fields, body: method == "HEAD" ? .data(Data()) : body,
            cacheStatus: answer.cacheStatus)
    }
}

/// Hands out a request body in the chunks libcurl asks for.
private final class DataReader: Sendable {
    private let data: Data
    private let offset = Mutex(0)

    init(_ data: Data) { self.data = data }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        offset.withLock { offset in
            let count = min(buffer.count, data.count - offset)
            guard count > 0 else { return 0 }
            data.copyBytes(to: buffer.bindMemory(to: UInt8.self), from: offset..<offset + count)
            offset += count
            return count
        }
    }
}
