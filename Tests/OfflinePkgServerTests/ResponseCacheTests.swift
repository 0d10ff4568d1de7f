import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

/// Small files go out as cached, finished responses; large ones and ranges from the file. Both must
/// answer the same bytes and headers, and the cache must stay within its bound.
@Suite struct ResponseCacheTests {
    static let host = "demo.offlinepkg.test"

    /// The demo set served by a store with `capacity` bytes of memory cache.
    static func serve(capacity: Int) async throws -> (TemporaryDirectory, PackageStore, LoopbackServer) {
        let scratch = try TemporaryDirectory()
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, memoryCacheCapacity: capacity))
        _ = try await Updater(store: store, manifestURL: demoManifest).sync()
        let server = try LoopbackServer(store: store, port: 0)
        try server.start()
        return (scratch, store, server)
    }

    func get(_ server: LoopbackServer, _ path: String, _ extra: [String] = []) throws -> HTTPReply {
        HTTPReply(try Tool.curl(["-D", "-", "-H", "Host: \(Self.host)"] + extra + [server.url.absoluteString + path]).stdout)
    }

    @Test func cachedAndUncachedAnswersAreTheSame() async throws {
        let (cachedScratch, cachedStore, cached) = try await Self.serve(capacity: 4 << 20)
        let (uncachedScratch, _, uncached) = try await Self.serve(capacity: 0)
        defer {
            withExtendedLifetime((cachedScratch, uncachedScratch)) {}
            cached.stop()
            uncached.stop()
        }
        let resource = try #require(cachedStore.resolve("https://demo.offlinepkg.test/css/site.css"))
        let bytes = try String(contentsOfFile: resource.path, encoding: .utf8)
        for round in 0..<3 {
            let fromCache = try get(cached, "css/site.css")
            let fromFile = try get(uncached, "css/site.css")
            #expect(fromCache.status == 200 && fromFile.status == 200, "round \(round)")
            #expect(fromCache.body == bytes && fromFile.body == bytes)
            for name in ["content-type", "content-length", "etag", "cache-control", "accept-ranges"] {
                #expect(fromCache.headers[name] != nil && fromCache.headers[name] == fromFile.headers[name], "\(name)")
            }
            let revalidated = try get(cached, "css/site.css", ["-H", "If-None-Match: \(resource.etag)"])
            #expect(revalidated.status == 304 && revalidated.body.isEmpty && revalidated.headers["etag"] == resource.etag)
            // A range is served from the file even when the whole file is cached.
            let range = try get(cached, "css/site.css", ["-H", "Range: bytes=0-3"])
            #expect(range.status == 206 && range.body == String(bytes.prefix(4)))
        }
        #expect(cached.cachedResponses.entries == 1)
        #expect(cached.cachedResponses.bytes == Int(resource.size))
        #expect(uncached.cachedResponses.entries == 0)
    }

    @Test func staysWithinItsCapacityAndEvicts() async throws {
        // Twenty files of 100 bytes against 800 bytes of cache (largest cached file: 100 bytes): at
        // most eight fit, so serving all of them twice must evict.
        let scratch = try TemporaryDirectory()
        var files = [String: String]()
        for number in 0..<20 {
            files["f\(number).txt"] = String(format: "%03d", number) + String(repeating: "x", count: 96) + "\n"
        }
        try SiteWriter.write(files, into: scratch.path("site"))
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1,
            packages: [.init(id: "app", version: "1", routes: ["https://app.example.test/"], site: scratch.path("site"))])
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, memoryCacheCapacity: 800))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let server = try LoopbackServer(store: store, port: 0)
        try server.start()
        defer { server.stop() }
        for _ in 0..<2 {
            for (name, text) in files.sorted(by: { $0.key < $1.key }) {
                let reply = HTTPReply(
                    try Tool.curl(["-D", "-", "-H", "Host: app.example.test", server.url.absoluteString + name]).stdout)
                #expect(reply.status == 200 && reply.body == text, "\(name)")
                #expect(server.cachedResponses.bytes <= 800)
            }
        }
        #expect(server.cachedResponses.entries == 8)
    }
}
