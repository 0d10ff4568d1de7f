import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `serve` takes SIGTERM from the moment it can answer: a supervisor or a benchmark that stops it right
/// after its first answer must see a clean exit, not a lost signal (a server left running) or a
/// death by signal.
@Suite struct ServeStartTests {
    @Test func aSigtermRightAfterStartEndsServeCleanly() throws {
        let scratch = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: scratch.path("root"), withIntermediateDirectories: true)
        for round in 0..<5 {
            let serve = try ChildProcess(OfflinePkgBinary.path, ["serve", "--root", scratch.path("root"), "--port", "0"])
            let url = serve.firstLine(timeout: 10) ?? ""
            try #require(url.hasPrefix("http://127.0.0.1:"), "round \(round): serve printed no URL: \(serve.stderr)")
            serve.signal(SIGTERM)
            let result = serve.wait(timeout: 10)
            #expect(!serve.endedBySignal && result.status == 0, "round \(round): \(result.status) \(serve.stderr)")
        }
    }

    /// Out of descriptors, the acceptor waits for one instead of spinning: the queued connection keeps
    /// the listener readable, and polling it again at once took a whole core (a phone's battery) until a
    /// descriptor came free. The limit is lowered under a running serve with prlimit(2).
    @Test func outOfDescriptorsTheAcceptorWaitsWithoutSpinning() throws {
        let scratch = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: scratch.path("root"), withIntermediateDirectories: true)
        let serve = try ChildProcess(OfflinePkgBinary.path, ["serve", "--root", scratch.path("root"), "--port", "0"])
        defer { serve.signal(SIGKILL); _ = serve.wait(timeout: 10) }
        let url = serve.firstLine(timeout: 10) ?? ""
        let port = try #require(url.split(separator: ":").last.flatMap { Int($0.split(separator: "/").first ?? "") }, "no port in \(url)")
        let pid = serve.pid
        // The lowest free descriptor number: a limit of it makes the next accept fail with EMFILE.
        let open = Set(try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").compactMap { Int($0) })
        let lowestFree = (0...).first { !open.contains($0) }!
        _ = try shell("prlimit --pid \(pid) --nofile=\(lowestFree):\(max(lowestFree, 1024))")
        // One connection the server cannot accept, held open for the whole measurement.
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0, "connect: \(errno)")
        let before = try Self.cpuTicks(pid)
        Thread.sleep(forTimeInterval: 2)
        let spent = try Self.cpuTicks(pid) - before
        // A spinning loop takes ~200 ticks in 2 s (100 a second); waiting 10 ms between tries, ~0.
        #expect(spent < 20, "serve used \(spent) ticks of CPU in 2 s with no descriptor to accept into")
    }

    /// User plus system time of `pid`, in clock ticks (/proc/PID/stat fields 14 and 15).
    private static func cpuTicks(_ pid: pid_t) throws -> Int {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let fields = stat[stat.range(of: ")")!.upperBound...].split(separator: " ")
        return Int(fields[11])! + Int(fields[12])!
    }
}
