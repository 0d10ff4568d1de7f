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

    /// Files past the cache go out from a memory map of the file, mapped from the page that holds a
    /// range's first byte: every range must come out exact, whatever its offset within a page.
    @Test func largeFilesAndRangesComeFromTheFileExactly() async throws {
        // 5 pages and a bit, every line different, so any shifted byte shows.
        let text = (0..<2_000).map { String(format: "line %05d\n", $0) }.joined()
        let (scratch, store, server) = try await Self.serve(["big.txt": text, "small.txt": "small\n"], capacity: 0)
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        func get(_ name: String, _ extra: [String] = []) throws -> HTTPReply {
            try self.get(server, name, extra, host: "app.example.test")
        }
        let bytes = Array(text.utf8)
        #expect(bytes.count == 22_000)

        let whole = try get("big.txt")
        #expect(whole.status == 200 && whole.body == text && whole.headers["content-length"] == "22000")
        for (start, end) in [
            (0, 0), (1, 4_095), (4_095, 4_096), (4_096, 8_191), (4_097, 12_345), (21_999, 21_999), (8_000, 21_999),
        ] {
            let reply = try get("big.txt", ["-H", "Range: bytes=\(start)-\(end)"])
            #expect(reply.status == 206, "\(start)-\(end)")
            #expect(reply.headers["content-range"] == "bytes \(start)-\(end)/22000")
            #expect(Array(reply.body.utf8) == Array(bytes[start...end]), "\(start)-\(end)")
        }
        let head = HTTPReply(try Tool.curl(["-I", "-H", "Host: app.example.test", server.url.absoluteString + "big.txt"]).stdout)
        #expect(head.status == 200 && head.headers["content-length"] == "22000" && head.body.isEmpty)
        #expect(server.cachedResponses.entries == 0)

        // A file changed on disk behind the index (here: truncated by hand) is refused, not sent short
        // under the index's Content-Length, and the server goes on serving the rest.
        let installed = try #require(store.resolve("https://app.example.test/big.txt")).path
        #expect(truncate(installed, 100) == 0)
        let damaged = try get("big.txt")
        #expect(damaged.status == 500 && damaged.body.contains("verify --repair"))
        #expect(try get("small.txt").body == "small\n")
    }

    /// A range (a media element's `Range: bytes=0-`, a resumed download) and a file past the
    /// large-file cache (16 MiB) over plain HTTP are sent from the open file with `sendfile`, as the
    /// cache's entries are, not copied out of a map: while a slow reader holds one, the server has the
    /// file open and no map of it, and it closes the file once the reader is gone.
    @Test func rangesAndFilesPastTheCachesAreSentFromTheOpenFile() async throws {
        // 17 MiB: past the large-file cache, and more than the loopback socket buffers take, so a
        // response stays in progress.
        let text = Self.numberedLines(bytes: 17 << 20, "of a file a slow reader asks for")
        let size = text.utf8.count
        let (scratch, store, server) = try await Self.serve(["movie.txt": text], capacity: 0)
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        let path = try #require(store.resolve("https://app.example.test/movie.txt")).path
        func openCount() -> Int {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == path }.count
        }
        func mapped() throws -> Bool { try String(contentsOfFile: "/proc/self/maps", encoding: .utf8).contains(path) }

        for (range, status) in [("Range: bytes=1-\r\n", "206"), ("", "200")] {
            do {
                let reader = try RawConnection(port: server.url.port!, receiveBuffer: 4096)
                #expect(reader.send("GET /movie.txt HTTP/1.1\r\nHost: app.example.test\r\n\(range)\r\n"))
                let start = String(decoding: reader.receiveSome(512), as: UTF8.self)
                #expect(start.hasPrefix("HTTP/1.1 \(status)"), "\(start.prefix(80))")
                if !range.isEmpty { #expect(start.contains("bytes 1-\(size - 1)/\(size)")) }
                #expect(openCount() == 1, "\(status): not sent from the open file")
                #expect(try !mapped(), "\(status): sent from a map of the file")
            }
            // The slow reader closed its connection.
            let closed = ContinuousClock.now + .seconds(5)
            while openCount() > 0, ContinuousClock.now < closed { try await Task.sleep(for: .milliseconds(20)) }
            #expect(openCount() == 0, "\(status): the file stays open after its reader went away")
        }

        // Exact bytes all the same, to a reader that takes them; HEAD tells the size and sends none.
        let reply = try get(server, "movie.txt", ["-H", "Range: bytes=1000-2999999"], host: "app.example.test")
        #expect(reply.status == 206 && Array(reply.body.utf8) == Array(Array(text.utf8)[1000...2_999_999]))
        let whole = try get(server, "movie.txt", host: "app.example.test")
        #expect(whole.status == 200 && whole.body == text)
        let head = HTTPReply(try Tool.curl(["-I", "-H", "Host: app.example.test", server.url.absoluteString + "movie.txt"]).stdout)
        #expect(head.status == 200 && head.headers["content-length"] == "\(size)" && head.body.isEmpty)
        #expect(server.cachedLargeResponses.entries == 0)
    }

    /// A file truncated behind the index while it is sent from the open file: `sendfile` returns 0
    /// from there on, which MHD would retry for as long as the server runs (its lane spinning, the
    /// file held open). Its connection is shut down instead, for a whole large file and for a range,
    /// and the server goes on answering.
    @Test func aFileTruncatedWhileSentClosesItsConnection() async throws {
        let text = Self.numberedLines(bytes: 12 << 20, "of a file truncated while it is sent")
        // 12 MiB, more than the loopback socket buffers take: the whole file goes out from the
        // large-file cache's open file, the range from the per-request path's. (Not the same bytes:
        // the tree would hold them once, both names one file.)
        let ranged = "ranged " + text
        let (scratch, store, server) = try await Self.serve(["whole.txt": text, "range.txt": ranged, "other.txt": "other\n"], capacity: 0)
        defer {
            withExtendedLifetime(scratch) {}
            server.stop()
        }
        for (name, request, size) in [
            ("whole.txt", "GET /whole.txt HTTP/1.1\r\nHost: app.example.test\r\n\r\n", text.utf8.count),
            ("range.txt", "GET /range.txt HTTP/1.1\r\nHost: app.example.test\r\nRange: bytes=10-\r\n\r\n", ranged.utf8.count),
        ] {
            let path = try #require(store.resolve("https://app.example.test/\(name)")).path
            let reader = try RawConnection(port: server.url.port!, receiveTimeout: 5, receiveBuffer: 4096)
            #expect(reader.send(request))
            #expect(!reader.receiveSome(256).isEmpty, "\(name): no answer began")
            #expect(truncate(path, size / 4) == 0)
            // Drain what is in flight: the connection must end, not stall with the file held open.
            var received = 0
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline {
                let bytes = reader.receiveSome(65536)
                if bytes.isEmpty { break }
                received += bytes.count
            }
            #expect(reader.isClosedByPeer(), "\(name): the connection stays open after its file was truncated")
            #expect(received < size, "\(name): more bytes than the truncated file holds")
        }
        #expect(server.connectionsClosedForChangedFile == 2)
        #expect(try get(server, "other.txt", host: "app.example.test").body == "other\n")
    }
}
