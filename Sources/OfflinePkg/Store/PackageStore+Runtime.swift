import FoundationEssentials
import Synchronization

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

    /// The answer for a URL hook (docs/protocol.md#the-runtime-cache): a package's file when one answers
    /// the URL, a `301` to the URL with its slash when it names a package folder without it
    /// (`redirect(for:)`), else the runtime
    /// cache's answer per the manifest's rule for it; nil when neither a package nor a rule covers it
    /// (the hook lets the request go on as it would without offlinepkg). Other methods than GET and
    /// HEAD on a rule's URLs go to the network unchanged, with `body` as their body. A host that holds a
    /// `URLRequest` passes it whole through the `OfflinePkgURLRequest` product's
    /// `cachedResponse(for:)`, which calls this.
    public func cachedResponse(
        url: String, method: String = "GET", headers: [(name: String, value: String)] = [], body: Data? = nil
    ) async throws -> CachedResponse? {
        let method = method.uppercased()
        if method == "GET" || method == "HEAD", let resource = resolve(url) {
            return CachedResponse(
                status: 200,
                headers: [
                    ("Content-Type", resource.mimeType), ("ETag", resource.etag), ("Content-Length", String(resource.size)),
                ],
                body: .file(URL(fileURLWithPath: resource.path)), cacheStatus: "offlinepkg; hit; detail=package")
        }
        if method == "GET" || method == "HEAD", let location = redirect(for: url) {
            return CachedResponse(
                status: 301, headers: [("Location", location), ("Content-Length", "0")], body: .data(Data()),
                cacheStatus: "offlinepkg; hit; detail=folder")
        }
        let cache = try runtimeCache()
        guard let route = cache.route(for: url) else { return nil }
        var runtimeRequest = RuntimeRequest(url: url, method: method, fields: headers)
        if let body {
            let reader = DataReader(body)
            runtimeRequest.body = { reader.read(into: $0) }
            runtimeRequest.bodyLength = Int64(body.count)
        }
        let answer = await cache.answer(runtimeRequest, route: route)
        let answerBody: CachedResponse.Body
        switch answer.body {
        case .empty: answerBody = .data(Data())
        case .data(let data): answerBody = .data(data)
        case .stored(let path, _): answerBody = .file(URL(fileURLWithPath: path))
        case .streamed(let stream):
            // Not stored: read once as it arrives, into memory (never onto the disk); nothing for a HEAD.
            if method == "HEAD" {
                stream.cancel()
                answerBody = .data(Data())
            } else {
                answerBody = .data(try await runBlocking { try stream.collect(limit: Int.max) })
            }
        }
        return CachedResponse(
            status: answer.status, headers: answer.fields, body: method == "HEAD" ? .data(Data()) : answerBody,
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
