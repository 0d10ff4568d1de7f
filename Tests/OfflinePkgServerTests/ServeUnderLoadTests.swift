import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// How `offlinepkg serve` shares itself between connections (docs/design.md, "Serve under load"):
/// a large body never holds up small answers, and the mapped large-file answers are exact.
/// Orderings and outcomes, not times.
@Suite(.serialized) struct ServeUnderLoadTests {
    static let host = "Host: m.example.com\r\n"
    static let bigSize = 12 << 20

    /// ServeHardeningTests' package at https://m.example.com/home/, with a 12 MiB file (within the
    /// mapped-response cache).
    final class Site: Sendable {
        let installed: ServeHardeningTests.Site
        let big: [UInt8]
        var root: String { installed.root }

        init() async throws {
            // Each 8 bytes hold their own offset, so a shifted or repeated block shows.
            let words = (0..<UInt64(ServeUnderLoadTests.bigSize / 8)).map { ($0 * 8).littleEndian }
            big = words.withUnsafeBytes { Array($0) }
            installed = try await ServeHardeningTests.Site(extra: ["big.bin": Data(big)])
        }
    }

    /// Under an open-file limit of 200, 110 clients that stop reading 4 MiB answers of 20 files (more
    /// than the large-file cache keeps, so evicted entries stay open while sent): serve keeps a
    /// tenth of its descriptors free, a fresh client is never told 404 for a file it has (it waits
    /// in the kernel's queue, or gets 503), and once the readers go every file is answered again.
    /// Before the budget counted a connection twice, the process reached its limit and answered 404.
    @Test func slowReadersOfManyLargeFilesNeverExhaustDescriptors() async throws {
        let names = (0..<20).map { "big-\($0).bin" }
        var extra = [String: Data]()
        for name in names { extra[name] = Data(count: 4 << 20) }
        let site = try await ServeHardeningTests.Site(extra: extra)
        let serve = try ServeProcess(
            root: site.root, environment: ["OFFLINEPKG_SERVE_THREADS": "1"], launcher: ["prlimit", "--nofile=200:200"])
        defer { serve.kill() }
        func descriptors() -> Int { ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(serve.pid)/fd")) ?? []).count }
        func probe(_ path: String) throws -> Int {
            let connection = try RawConnection(port: serve.port, receiveTimeout: 2)
            connection.send("GET \(path) HTTP/1.1\r\n\(Self.host)Connection: close\r\n\r\n")
            return connection.readResponse()?.status ?? 0
        }
        var holders = [RawConnection]()
        for index in 0..<110 {
            let holder = try RawConnection(port: serve.port, receiveTimeout: 1, receiveBuffer: 4096)
            holder.send("GET /home/\(names[index % names.count]) HTTP/1.1\r\n\(Self.host)\r\n")
            holders.append(holder)
        }
        var most = 0
        var statuses = [Int]()
        for round in 0..<6 {
            try await Task.sleep(nanoseconds: 300_000_000)
            most = max(most, descriptors())
            statuses.append(try probe(round % 2 == 0 ? "/home/n.txt" : "/home/\(names[round])"))
        }
        // 60 connections, each with at most one file, and 16 cached files: about 140 with its own.
        #expect(most < 180, "serve held \(most) of its 200 descriptors")
        #expect(!statuses.contains(404), "a file serve has was answered 404: \(statuses)")
        #expect(statuses.allSatisfy { [0, 200, 503].contains($0) }, "\(statuses)")
        holders.removeAll()
        var after = 0
        for _ in 0..<20 where after != 200 {
            try await Task.sleep(nanoseconds: 250_000_000)
            after = try probe("/home/\(names[19])")
        }
        #expect(after == 200, "after the readers left: \(after)")
    }

    /// With one server thread, a client that stops reading a 12 MiB body (its receive window full,
    /// the server's send buffer full) does not hold up anyone: 200 small requests on 4 other
    /// connections are all answered while the big body is still unfinished; then it completes, exact.
    @Test func aLargeBodyDoesNotHoldUpSmallAnswers() async throws {
        let site = try await Site()
        let serve = try ServeProcess(root: site.root, environment: ["OFFLINEPKG_SERVE_THREADS": "1"])
        // The body cannot be all in flight: it is larger than the server's largest send buffer and
        // the client's receive buffer together.
        let sendBufferMax = try String(contentsOfFile: "/proc/sys/net/ipv4/tcp_wmem", encoding: .utf8)
            .split(whereSeparator: \.isWhitespace).last.flatMap { Int($0) } ?? 0
        try #require(sendBufferMax > 0 && sendBufferMax + (64 << 10) < Self.bigSize, "tcp_wmem max \(sendBufferMax)")
        let slow = try RawConnection(port: serve.port, receiveBuffer: 16 << 10)
        slow.send("GET /home/big.bin HTTP/1.1\r\n\(Self.host)\r\n")
        var received = slow.receiveSome(4096)
        #expect(String(decoding: received.prefix(15), as: UTF8.self) == "HTTP/1.1 200 OK", "\(received.count) bytes")

        let others = try (0..<4).map { _ in try RawConnection(port: serve.port) }
        var answered = 0
        for round in 0..<50 {
            for connection in others {
                connection.send("GET /home/n.txt HTTP/1.1\r\n\(Self.host)\r\n")
                let reply = connection.readResponse()
                #expect(reply?.status == 200 && reply?.body == "0123456789", "round \(round)")
                if reply?.status == 200 { answered += 1 }
            }
        }
        #expect(answered == 200)
        // All answered while the big body was unfinished (the slow client had read 4 KiB of it).

        received += Self.readToEnd(slow, after: received)
        let body = try #require(Self.body(received))
        #expect(body.count == Self.bigSize)
        // Compared as a Bool: a failure message listing 12 MiB of bytes would take minutes to print.
        let exact = body.elementsEqual(site.big)
        #expect(exact, "the 12 MiB body differs from the file")
    }

    /// Two clients reading the same mapped file at once, and a range of it, get its exact bytes.
    @Test func concurrentLargeAnswersAreExact() async throws {
        let site = try await Site()
        let serve = try ServeProcess(root: site.root)
        let first = try RawConnection(port: serve.port)
        let second = try RawConnection(port: serve.port)
        first.send("GET /home/big.bin HTTP/1.1\r\n\(Self.host)\r\n")
        second.send("GET /home/big.bin HTTP/1.1\r\n\(Self.host)\r\n")
        var replies = [[UInt8]](repeating: [], count: 2)
        // Read them in turns, so both are sending at once.
        while !(Self.isComplete(replies[0]) && Self.isComplete(replies[1])) {
            let before = replies[0].count + replies[1].count
            if !Self.isComplete(replies[0]) { replies[0] += first.receiveSome(256 << 10) }
            if !Self.isComplete(replies[1]) { replies[1] += second.receiveSome(256 << 10) }
            if replies[0].count + replies[1].count == before { break }
        }
        for reply in replies {
            let body = try #require(Self.body(reply))
            let exact = body.elementsEqual(site.big)
            #expect(exact, "a concurrent 12 MiB answer differs from the file")
        }
        let ranged = try RawConnection(port: serve.port)
        ranged.send("GET /home/big.bin HTTP/1.1\r\n\(Self.host)Range: bytes=4095-1048580\r\n\r\n")
        let reply = Self.readToEnd(ranged, after: [])
        #expect(String(decoding: reply.prefix(12), as: UTF8.self) == "HTTP/1.1 206")
        let exact = try #require(Self.body(reply)).elementsEqual(site.big[4095...1_048_580])
        #expect(exact, "the range differs from the file")
    }

    static func headerEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        let start = (0...(data.count - 4)).first { data[$0] == 13 && data[$0 + 1] == 10 && data[$0 + 2] == 13 && data[$0 + 3] == 10 }
        return start.map { $0 + 4 }
    }

    static func contentLength(_ data: [UInt8], headerEnd: Int) -> Int? {
        let text = String(decoding: data[..<headerEnd], as: UTF8.self).lowercased()
        guard let line = text.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }) else { return nil }
        return Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
    }

    static func isComplete(_ data: [UInt8]) -> Bool { body(data) != nil }

    /// Reads until the response begun in `data` is whole (or the peer stops sending); the new bytes.
    static func readToEnd(_ connection: RawConnection, after data: [UInt8]) -> [UInt8] {
        var all = data
        while !isComplete(all) {
            let chunk = connection.receiveSome(1 << 20)
            if chunk.isEmpty { break }
            all += chunk
        }
        return Array(all[data.count...])
    }

    /// The body of one whole response, or nil while it is incomplete.
    static func body(_ data: [UInt8]) -> ArraySlice<UInt8>? {
        guard let end = headerEnd(data), let length = contentLength(data, headerEnd: end), data.count >= end + length else {
            return nil
        }
        return data[end..<end + length]
    }
}
