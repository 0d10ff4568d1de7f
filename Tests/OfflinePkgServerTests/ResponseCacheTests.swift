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

    /// `files` as package `app` on https://app.example.test/, served by a store with `capacity` bytes
    /// of memory cache, by one lane unless `threadModel` says otherwise (whatever the machine's cores).
    static func serve(
        _ files: [String: String], capacity: Int, threadModel: LoopbackServer.ThreadModel = .pool(threads: 1)
    ) async throws -> (TemporaryDirectory, PackageStore, LoopbackServer) {
        let scratch = try TemporaryDirectory()
        try writeSite(files, to: scratch.path("site"))
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1,
            packages: [.init(id: "app", version: "1", routes: ["https://app.example.test/"], site: scratch.path("site"))])
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, memoryCacheCapacity: capacity))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let server = try LoopbackServer(store: store, port: 0, threadModel: threadModel)
        try server.start()
        return (scratch, store, server)
    }

    /// At least `bytes` of text, every line different ("line N <phrase>"), so any shifted byte shows.
    static func numberedLines(bytes: Int, _ phrase: String) -> String {
        var text = ""
        text.reserveCapacity(bytes + 64)
        var line = 0
        while text.utf8.count < bytes {
            text += "line \(line) \(phrase)\n"
            line += 1
        }
        return text
    }

    func get(_ server: LoopbackServer, _ path: String, _ extra: [String] = [], host: String = Self.host) throws -> HTTPReply {
        HTTPReply(try Tool.curl(["-D", "-", "-H", "Host: \(host)"] + extra + [server.url.absoluteString + path]).stdout)
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
        // Each lane (server thread) that answered it holds it once, at its size.
        let lanes = cached.cachedResponsesPerLane
        #expect(lanes.allSatisfy { $0.entries <= 1 && $0.bytes == $0.entries * Int(resource.size) }, "\(lanes)")
        #expect(cached.cachedResponses.entries >= 1)
        #expect(uncached.cachedResponses.entries == 0)
    }

    @Test func staysWithinItsCapacityAndEvicts() async throws {
        // Twenty files of 100 bytes against 800 bytes of cache (largest cached file: 100 bytes): at
        // most eight fit, so serving all of them twice must evict.
        var files = [String: String]()
        for number in 0..<20 {
            files["f\(number).txt"] = String(format: "%03d", number) + String(repeating: "x", count: 96) + "\n"
        }
        let (scratch, _, server) = try await Self.serve(files, capacity: 800)
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        for _ in 0..<2 {
            for (name, text) in files.sorted(by: { $0.key < $1.key }) {
                let reply = try get(server, name, host: "app.example.test")
                #expect(reply.status == 200 && reply.body == text, "\(name)")
                #expect(server.cachedResponses.bytes <= 800)
            }
        }
        #expect(server.cachedResponses.entries == 8)
    }

    /// Twenty files of 100 bytes each (the largest an 800-byte cache keeps), "fNN.txt".
    static let hundredByteFiles = Dictionary(uniqueKeysWithValues: (0..<20).map { number in
        (String(format: "f%02d.txt", number), String(format: "%03d", number) + String(repeating: "x", count: 96) + "\n")
    })

    /// Asks for `names` on `connection` (keep-alive) and checks every answer is the file.
    static func fetch(_ names: some Sequence<String>, on connection: RawConnection) {
        for name in names {
            connection.send("GET /\(name) HTTP/1.1\r\nHost: app.example.test\r\n\r\n")
            let reply = connection.readResponse()
            #expect(reply?.status == 200 && reply?.body == hundredByteFiles[name], "\(name)")
        }
    }

    /// With the standard model's spare lane idle, the one lane in use caches as much as one cache of
    /// the whole capacity would: the lanes draw on one budget, not a fixed share each.
    @Test func theLaneInUseHasTheWholeCapacity() async throws {
        let (scratch, _, server) = try await Self.serve(
            Self.hundredByteFiles, capacity: 800, threadModel: .elastic(threads: 1, busyThreads: 2, spreadPast: 128))
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        let connection = try RawConnection(port: Int(server.port))
        Self.fetch(Self.hundredByteFiles.keys.sorted(), on: connection)
        #expect(server.cachedResponsesPerLane.map(\.entries) == [8, 0], "\(server.cachedResponsesPerLane)")
    }

    /// Two lanes both caching hold no more than the capacity between them; a lane that finds the budget
    /// taken answers uncached, whole and right.
    @Test func lanesCachingTogetherStayWithinTheCapacity() async throws {
        let (scratch, _, server) = try await Self.serve(Self.hundredByteFiles, capacity: 800, threadModel: .pool(threads: 2))
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        let connections = try (0..<2).map { _ in try RawConnection(port: Int(server.port)) }
        #expect(try await ConnectionLanesTests.waitForTotal(server, 2) == [1, 1])
        let names = Self.hundredByteFiles.keys.sorted()
        for _ in 0..<2 {
            for connection in connections { Self.fetch(names, on: connection) }
            #expect(server.cachedResponses.bytes <= 800, "\(server.cachedResponsesPerLane)")
        }
        Self.fetch(names.prefix(4), on: connections[1])
        Self.fetch(names.suffix(4), on: connections[0])
        #expect(server.cachedResponses.bytes <= 800 && server.cachedResponses.bytes == server.cachedResponses.entries * 100)
        #expect(server.cachedBytesTaken == server.cachedResponses.bytes)
    }

    /// A lane that opened under load gives its cached bytes back when its last connection closes, so
    /// the quiet lane has the whole capacity again.
    @Test func aLaneOpenedUnderLoadGivesItsBytesBackWhenItEmpties() async throws {
        let (scratch, _, server) = try await Self.serve(
            Self.hundredByteFiles, capacity: 800, threadModel: .elastic(threads: 1, busyThreads: 2, spreadPast: 1))
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        let names = Self.hundredByteFiles.keys.sorted()
        let quiet = try RawConnection(port: Int(server.port))
        #expect(try await ConnectionLanesTests.waitForTotal(server, 1) == [1, 0])
        Self.fetch(names[0..<4], on: quiet)
        var busy: RawConnection? = try RawConnection(port: Int(server.port))
        #expect(try await ConnectionLanesTests.waitForTotal(server, 2) == [1, 1])
        Self.fetch(names[4..<8], on: try #require(busy))
        #expect(server.cachedResponsesPerLane.map(\.entries) == [4, 4])

        busy = nil
        #expect(try await ConnectionLanesTests.waitForTotal(server, 1) == [1, 0])
        // The lane's thread drops its entries right after its count falls.
        let start = Date()
        while server.cachedResponsesPerLane[1].entries != 0, Date().timeIntervalSince(start) < 5 {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(server.cachedResponsesPerLane.map(\.entries) == [4, 0])
        #expect(server.cachedBytesTaken == 400)
        Self.fetch(names[8..<12], on: quiet)
        #expect(server.cachedResponsesPerLane.map(\.entries) == [8, 0], "\(server.cachedResponsesPerLane)")
        #expect(server.cachedBytesTaken == 800)
    }

    /// A switch drops the cached responses of the trees no longer active: kept until evicted, they grew
    /// a long-running serve by every file answered from every tree it ever served (memory must stay
    /// flat across updates).
    @Test func aSwitchDropsTheOldTreesResponses() async throws {
        let scratch = try TemporaryDirectory()
        defer { withExtendedLifetime(scratch) {} }
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        func publish(_ version: Int) throws {
            try writeSite(["a.txt": "a \(version)\n", "b.txt": "b \(version)\n"], to: scratch.path("site-\(version)"))
            try repository.publish(
                sequence: version,
                packages: [.init(id: "app", version: "\(version)", routes: ["https://app.example.test/"], site: scratch.path("site-\(version)"))])
        }
        try publish(1)
        let store = try PackageStore(
            root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0, memoryCacheCapacity: 4 << 20))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let server = try LoopbackServer(store: store, port: 0, threadModel: .pool(threads: 1))
        try server.start()
        defer { server.stop() }
        for name in ["a.txt", "b.txt"] { #expect(try get(server, name, host: "app.example.test").body == "\(name.prefix(1)) 1\n") }
        #expect(server.cachedResponses.entries == 2)

        try publish(2)
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        // The switch reached the store (and the server) before `sync` returned.
        #expect(store.activeSet.packages.first?.version == "2")
        #expect(server.cachedResponses.entries == 0, "responses of the old tree kept after the switch")
        #expect(server.cachedBytesTaken == 0, "the old tree's bytes not given back to the shared capacity")
        #expect(server.cachedResponses.bytes == 0)
        #expect(try get(server, "a.txt", host: "app.example.test").body == "a 2\n")
        #expect(server.cachedResponses.entries == 1)
    }

    /// Large files over plain HTTP are cached as the open file, sent with `sendfile`: exact bytes to
    /// connections sharing one response, at most `openFileLimit` files held open, and none once the
    /// server stops.
    @Test func largeFilesAreSentFromAtMostSixteenOpenFiles() async throws {
        let names = (0..<20).map { "big-\($0).txt" }
        var files = [String: String]()
        for (index, name) in names.enumerated() {
            files[name] = (0..<2_000).map { String(format: "%02d line %05d\n", index, $0) }.joined()
        }
        // No copied cache: every file goes to the large-file cache.
        let (scratch, store, server) = try await Self.serve(files, capacity: 0)
        defer { withExtendedLifetime(scratch) {} }
        let tree = try #require(store.resolve("https://app.example.test/big-0.txt")).path.split(separator: "/").dropLast().joined(separator: "/")
        func openInTree() -> Int {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return fds.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "").hasPrefix("/" + tree + "/") }.count
        }
        let before = openInTree()
        #expect(try get(server, names[0], host: "app.example.test").body == files[names[0]])
        #expect(server.cachedLargeResponses.entries == 1)
        #expect(openInTree() == before + 1, "a cached large file is held open")
        // Eight connections at once on the one cached response.
        let replies = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<8 { group.addTask { try get(server, names[0], host: "app.example.test").body } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(replies.count == 8 && replies.allSatisfy { $0 == files[names[0]] })
        for name in names.dropFirst() { #expect(try get(server, name, host: "app.example.test").body == files[name], "\(name)") }
        #expect(server.cachedLargeResponses.entries == 16)
        #expect(openInTree() == before + 16, "evicted entries must close their files")
        // Evicted and reloaded: the same bytes.
        #expect(try get(server, names[0], host: "app.example.test").body == files[names[0]])
        server.stop()
        #expect(openInTree() == before, "files held open after the server stopped")
    }

    /// A host that makes server after server on one store (a shell reopened, a test harness) leaves
    /// nothing of the stopped ones with the store: their switch observers go at the next switch.
    @Test func stoppedServersLeaveNoSwitchObserverBehind() async throws {
        let scratch = try TemporaryDirectory()
        defer { withExtendedLifetime(scratch) {} }
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        func publish(_ version: Int) async throws {
            try writeSite(["a.txt": "a \(version)\n"], to: scratch.path("site-\(version)"))
            try repository.publish(
                sequence: version,
                packages: [.init(id: "app", version: "\(version)", routes: ["https://app.example.test/"], site: scratch.path("site-\(version)"))])
        }
        try await publish(1)
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        for _ in 0..<10 {
            let server = try LoopbackServer(store: store, port: 0, threadModel: .pool(threads: 2))
            try server.start()
            server.stop()
        }
        let kept = try LoopbackServer(store: store, port: 0, threadModel: .pool(threads: 2))
        try kept.start()
        defer { kept.stop() }
        // Two lanes a server, one observer a lane.
        #expect(store.switchObserverCount == 22)
        try await publish(2)
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        #expect(store.switchObserverCount == 2, "observers of stopped servers kept after a switch")
        #expect(try get(kept, "a.txt", host: "app.example.test").body == "a 2\n")
    }
}
