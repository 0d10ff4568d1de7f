import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// How `LoopbackServer` shares connections between its threads (docs/design.md, "Serving webviews"):
/// it accepts itself and hands each new connection to the lane (one pool thread) holding the
/// fewest, and each lane answers from its own response cache. Counts and answers, not times.
@Suite(.serialized) struct ConnectionLanesTests {
    static let request = "GET /css/site.css HTTP/1.1\r\nHost: demo.offlinepkg.test\r\n\r\n"

    /// Waits up to 5 s for the lanes to hold `expected` connections in all.
    static func waitForTotal(_ server: LoopbackServer, _ expected: Int) async throws -> [Int] {
        let start = Date()
        while server.connectionsPerLane.reduce(0, +) != expected, Date().timeIntervalSince(start) < 5 {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return server.connectionsPerLane
    }

    /// The standard model runs one lane per two cores, at least one, while they hold fewer than 128
    /// connections each on average, and a lane per core past that: a lane per core left more busy threads than
    /// cores with a web view's few connections, and a lane off its core holds its connections for a
    /// scheduler slice; with hundreds, one lane is never idle and is one thread among its clients'
    /// many. A server started with it has a lane per core.
    @Test func theStandardModelIsALanePerTwoCoresSpreadingToOnePerCore() async throws {
        #expect([1, 2, 3, 4, 8, 16].map { LoopbackServer.ThreadModel.lanes(cores: $0) } == [1, 1, 1, 2, 4, 8])
        #expect(LoopbackServer.ThreadModel.lanes(cores: 0) == 1)
        #expect(LoopbackServer.ThreadModel.standard(cores: 2) == .elastic(threads: 1, busyThreads: 2, spreadPast: 128))
        #expect(LoopbackServer.ThreadModel.standard(cores: 8) == .elastic(threads: 4, busyThreads: 8, spreadPast: 128))
        #expect(LoopbackServer.ThreadModel.standard(cores: 1) == .elastic(threads: 1, busyThreads: 1, spreadPast: 128))
        let cores = ProcessInfo.processInfo.activeProcessorCount
        #expect(LoopbackServer.ThreadModel.standard == .standard(cores: cores))
        let demo = try await ServedDemo()
        #expect(demo.server.connectionsPerLane.count == max(1, cores))
    }

    /// An elastic pool keeps new connections on its quiet lanes until they hold `spreadPast` each, then
    /// hands them to the emptiest of all its lanes; once the load is gone, new ones go to the quiet
    /// lanes again. Every connection is answered wherever it went.
    @Test func anElasticPoolSpreadsOnlyPastItsThreshold() async throws {
        let demo = try await ServedDemo(threadModel: .elastic(threads: 1, busyThreads: 2, spreadPast: 4))
        var connections = try (0..<4).map { _ in try RawConnection(port: Int(demo.port)) }
        #expect(try await Self.waitForTotal(demo.server, 4) == [4, 0])
        connections.append(try RawConnection(port: Int(demo.port)))
        #expect(try await Self.waitForTotal(demo.server, 5) == [4, 1])
        connections += try (0..<5).map { _ in try RawConnection(port: Int(demo.port)) }
        #expect(try await Self.waitForTotal(demo.server, 10) == [5, 5])
        for connection in connections { connection.send(Self.request) }
        #expect(connections.allSatisfy { $0.readResponse()?.status == 200 })

        connections.removeAll()
        #expect(try await Self.waitForTotal(demo.server, 0) == [0, 0])
        connections = try (0..<3).map { _ in try RawConnection(port: Int(demo.port)) }
        #expect(try await Self.waitForTotal(demo.server, 3) == [3, 0])
        for connection in connections { connection.send(Self.request) }
        #expect(connections.allSatisfy { $0.readResponse()?.status == 200 })
    }

    /// With two quiet lanes, the threshold is theirs on average: four connections fill them two each,
    /// and only the fifth opens the third lane.
    @Test func anElasticPoolCountsItsQuietLanesTogether() async throws {
        let demo = try await ServedDemo(threadModel: .elastic(threads: 2, busyThreads: 3, spreadPast: 2))
        var connections = try (0..<4).map { _ in try RawConnection(port: Int(demo.port)) }
        #expect(try await Self.waitForTotal(demo.server, 4) == [2, 2, 0])
        connections.append(try RawConnection(port: Int(demo.port)))
        #expect(try await Self.waitForTotal(demo.server, 5) == [2, 2, 1])
        for connection in connections { connection.send(Self.request) }
        #expect(connections.allSatisfy { $0.readResponse()?.status == 200 })
    }

    /// A model the server cannot run is refused by name, before anything binds.
    @Test(arguments: [
        LoopbackServer.ThreadModel.pool(threads: 0), .elastic(threads: 0, busyThreads: 2, spreadPast: 4),
        .elastic(threads: 2, busyThreads: 1, spreadPast: 4), .elastic(threads: 1, busyThreads: 2, spreadPast: 0),
    ])
    func aModelWithoutLanesIsRefused(model: LoopbackServer.ThreadModel) throws {
        let scratch = try TemporaryDirectory()
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        #expect {
            _ = try LoopbackServer(store: store, port: 0, threadModel: model)
        } throws: { error in
            guard case OfflinePkgError.invalidArgument(let reason) = error else { return false }
            return reason.contains("thread")
        }
    }

    /// 256 keep-alive connections opened back to back (as wrk opens its 64 or 512) land on the four
    /// lanes 64 each, every request on every one is answered whole; closed, they leave their lanes,
    /// and the next ones fill the emptiest lane first.
    @Test func newConnectionsGoToTheLaneWithTheFewestAndAllAreAnswered() async throws {
        _ = raiseOpenFileLimit()
        let demo = try await ServedDemo(threadModel: .pool(threads: 4))
        let expected = try String(contentsOfFile: try #require(demo.store.resolve("https://demo.offlinepkg.test/css/site.css")).path, encoding: .utf8)
        var connections = try (0..<256).map { _ in try RawConnection(port: Int(demo.port)) }
        var answered = 0
        for _ in 0..<3 {
            for connection in connections { connection.send(Self.request) }
            for connection in connections {
                let reply = connection.readResponse()
                if reply?.status == 200 && reply?.body == expected { answered += 1 }
            }
        }
        #expect(answered == 3 * 256)
        let lanes = try await Self.waitForTotal(demo.server, 256)
        #expect(lanes == [64, 64, 64, 64], "connections per lane: \(lanes)")

        // Close the first 64 (handed out in turn: 16 from each lane); 64 new ones make the lanes even again.
        connections.removeFirst(64)
        let afterClose = try await Self.waitForTotal(demo.server, 192)
        #expect(afterClose == [48, 48, 48, 48], "after closing 64: \(afterClose)")
        connections += try (0..<64).map { _ in try RawConnection(port: Int(demo.port)) }
        for connection in connections.suffix(64) { connection.send(Self.request) }
        #expect(connections.suffix(64).allSatisfy { $0.readResponse()?.status == 200 })
        let refilled = try await Self.waitForTotal(demo.server, 256)
        #expect(refilled == [64, 64, 64, 64], "after 64 new connections: \(refilled)")

        connections.removeAll()
        let empty = try await Self.waitForTotal(demo.server, 0)
        #expect(empty == [0, 0, 0, 0], "after closing all: \(empty)")
    }

    /// With one lane holding more connections (the others' closed), new ones go to the others until
    /// they are even.
    @Test func aLaneLeftEmptyIsFilledFirst() async throws {
        let demo = try await ServedDemo(threadModel: .pool(threads: 2))
        var first = try (0..<8).map { _ in try RawConnection(port: Int(demo.port)) }
        #expect(try await Self.waitForTotal(demo.server, 8) == [4, 4])
        // The ones on lane 0 were handed out first, third, ...: close those.
        first = first.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
        #expect(try await Self.waitForTotal(demo.server, 4) == [0, 4])
        let next = try (0..<4).map { _ in try RawConnection(port: Int(demo.port)) }
        #expect(try await Self.waitForTotal(demo.server, 8) == [4, 4])
        for connection in first + next { connection.send(Self.request) }
        #expect((first + next).allSatisfy { $0.readResponse()?.status == 200 })
    }

    /// Each lane caches a small file in its own cache (nothing shared between threads on the hot
    /// path), and the lanes' caches together stay within the store's capacity.
    @Test func eachLaneAnswersFromItsOwnCache() async throws {
        let demo = try await ServedDemo(threadModel: .pool(threads: 2))
        let connections = try (0..<2).map { _ in try RawConnection(port: Int(demo.port)) }
        for connection in connections {
            connection.send(Self.request)
            #expect(connection.readResponse()?.status == 200)
        }
        let size = Int(try #require(demo.store.resolve("https://demo.offlinepkg.test/css/site.css")).size)
        let lanes = demo.server.cachedResponsesPerLane
        #expect(lanes.map(\.entries) == [1, 1] && lanes.map(\.bytes) == [size, size], "\(lanes)")
    }

    /// 256 keep-alive connections on two lanes, each lane's 128 requests all in at once (the server
    /// stopped while they are sent): every one is answered. libmicrohttpd 0.9.75's epoll loop, given
    /// exactly 128 events, waits again with the timeout it computed before (here up to the 60 s
    /// connection timeout), so these requests sat unanswered; the lanes poll instead.
    @Test func aLaneWithAHundredAndTwentyEightRequestsInAtOnceAnswersThem() async throws {
        _ = raiseOpenFileLimit()
        let site = try await ServeHardeningTests.Site()
        let serve = try ServeProcess(root: site.root, environment: ["OFFLINEPKG_SERVE_THREADS": "2"])
        let request = "GET /home/n.txt HTTP/1.1\r\n\(ServeHardeningTests.host)\r\n"
        let connections = try (0..<256).map { _ in try RawConnection(port: serve.port) }
        // First round: every connection accepted, answered and waiting in its lane for the next request.
        for connection in connections { connection.send(request) }
        #expect(connections.allSatisfy { $0.readResponse()?.body == "0123456789" })
        for round in 0..<2 {
            kill(serve.pid, SIGSTOP)
            for connection in connections { connection.send(request) }
            kill(serve.pid, SIGCONT)
            // Stops at the first unanswered one (5 s receive timeout), not 5 s for each.
            var answered = 0
            for connection in connections {
                guard connection.readResponse()?.body == "0123456789" else { break }
                answered += 1
            }
            #expect(answered == 256, "round \(round): \(answered) answered in turn, then one not within 5 s")
        }
    }

    /// A host app that stops its server when it goes to the background and starts it again on return
    /// keeps the header deadline: the sweeper of the first start ended with its stop, and a new one
    /// runs for the second (it once stayed ended, and tricklers were held for good).
    @Test func aServerStoppedAndStartedAgainStillClosesATrickler() async throws {
        let scratch = try TemporaryDirectory()
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: demoManifest).sync()
        let server = try LoopbackServer(store: store, port: 0, threadModel: .pool(threads: 2), limits: .init(headerTimeout: 1, idleTimeout: 5))
        try server.start()
        server.stop()
        try server.start()
        defer { server.stop() }
        let trickler = try RawConnection(port: Int(server.port))
        #expect(trickler.send("GET / HTTP/1.1\r\nX-Slow: "))
        let start = Date()
        var closedAfter: TimeInterval?
        while closedAfter == nil, Date().timeIntervalSince(start) < 6 {
            if !trickler.send("a") || trickler.isClosedByPeer() { closedAfter = Date().timeIntervalSince(start) }
            try await Task.sleep(nanoseconds: 250_000_000)
        }
        let closed = try #require(closedAfter, "a trickler was still open 6 s after a restart, with a 1 s header deadline")
        #expect(closed < 4, "closed after \(closed) s")
        #expect(server.connectionsClosedByDeadline >= 1)
    }

    /// At the connection limit, with every held connection busy (here: in the middle of sending its
    /// headers), a new connection waits in the kernel's queue, neither answered nor closed, and is
    /// answered as soon as a held one closes.
    @Test func pastTheLimitANewConnectionWaitsForAFreeSlot() async throws {
        let (server, scratch) = try await Self.serverWithLimit(4)
        defer { server.stop(); withExtendedLifetime(scratch) {} }
        var held = try (0..<4).map { _ in try RawConnection(port: Int(server.port)) }
        for connection in held { #expect(connection.send("GET /css/site.css HTTP/1.1\r\n")) }
        #expect(try await Self.waitForTotal(server, 4).reduce(0, +) == 4)
        let waiting = try RawConnection(port: Int(server.port), receiveTimeout: 0.5)
        waiting.send(Self.request)
        #expect(waiting.readResponse() == nil, "answered past the limit of 4")
        #expect(!waiting.isClosedByPeer())
        #expect(server.connectionsPerLane.reduce(0, +) == 4)
        #expect(server.idleConnectionsClosedForRoom == 0, "a connection sending its headers was closed for room")
        held.removeFirst()
        let start = Date()
        var reply: HTTPReply?
        while reply == nil, Date().timeIntervalSince(start) < 5 { reply = waiting.readResponse() }
        #expect(reply?.status == 200, "not answered after a held connection closed")
    }

    /// At the limit with keep-alive connections idle between requests (a browser keeps six per host
    /// open for a minute), a new client is answered at once, not after the 60 s idle timeout: the
    /// connection idle longest is closed for it, as nginx does, and only that one.
    @Test func atTheLimitTheLongestIdleConnectionMakesRoomForANewClient() async throws {
        let (server, scratch) = try await Self.serverWithLimit(4)
        defer { server.stop(); withExtendedLifetime(scratch) {} }
        let held = try await Self.idleConnections(4, to: server)
        let start = Date()
        let newcomer = try RawConnection(port: Int(server.port), receiveTimeout: 3)
        newcomer.send(Self.request)
        let reply = newcomer.readResponse()
        let took = Date().timeIntervalSince(start)
        #expect(reply?.status == 200, "a new client was not answered within 3 s at the limit, with 4 idle connections held")
        #expect(took < 1, "answered after \(took) s")
        #expect(server.idleConnectionsClosedForRoom == 1)
        #expect(held[0].isClosedByPeer(), "the connection idle longest was kept")
        for connection in held.dropFirst() {
            #expect(!connection.isClosedByPeer())
        }
        // The three kept still answer; the closed one's client reconnects like any browser.
        held[3].send(Self.request)
        #expect(held[3].readResponse()?.status == 200)
    }

    /// A keep-alive connection whose client has begun its next request (bytes sent, headers not
    /// complete) is not idle: at the limit the connection idle longest among the others is closed, and
    /// the begun request is answered.
    @Test func atTheLimitAConnectionThatBeganItsNextRequestIsKept() async throws {
        let (server, scratch) = try await Self.serverWithLimit(4)
        defer { server.stop(); withExtendedLifetime(scratch) {} }
        let held = try await Self.idleConnections(4, to: server)
        // The longest idle starts its next request; the rest of its headers come after the newcomer.
        #expect(held[0].send("GET /css/site.css HTTP/1.1\r\nHost: demo.offlinepkg.test\r\n"))
        try await Task.sleep(nanoseconds: 50_000_000)
        let newcomer = try RawConnection(port: Int(server.port), receiveTimeout: 3)
        newcomer.send(Self.request)
        #expect(newcomer.readResponse()?.status == 200, "the newcomer was not answered at the limit")
        #expect(held[0].send("\r\n"))
        #expect(held[0].readResponse()?.status == 200, "a begun request was cut off to make room")
        #expect(held[1].isClosedByPeer(), "the next longest idle was kept")
        #expect(server.idleConnectionsClosedForRoom == 1)
    }

    /// `count` keep-alive connections, each answered once and then idle, in this order: the first is
    /// idle longest.
    static func idleConnections(_ count: Int, to server: LoopbackServer) async throws -> [RawConnection] {
        var held = [RawConnection]()
        for _ in 0..<count {
            let connection = try RawConnection(port: Int(server.port))
            connection.send(Self.request)
            #expect(connection.readResponse()?.status == 200)
            held.append(connection)
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return held
    }

    /// A server of the demo with a connection limit, on two lanes, and the folder of its root.
    static func serverWithLimit(_ limit: Int) async throws -> (LoopbackServer, TemporaryDirectory) {
        let scratch = try TemporaryDirectory()
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: demoManifest).sync()
        let server = try LoopbackServer(store: store, port: 0, threadModel: .pool(threads: 2), limits: .init(connectionLimit: limit))
        try server.start()
        return (server, scratch)
    }
}
