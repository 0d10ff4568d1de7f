import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

/// Files past the caches: sent from the file, ranges exact, a truncated file closing its connection.
extension ResponseCacheTests {
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
