import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `offlinepkg serve` as a process: prints its URL, serves, stops cleanly on SIGTERM and SIGINT.
@Suite struct ServeCommandTests {
    @Test(arguments: [SIGTERM, SIGINT])
    func printsURLServesAndStopsOnSignal(signal: Int32) async throws {
        let scratch = try TemporaryDirectory()
        let root = scratch.path("root")
        let sync = await InProcessCLI.run(["sync", demoManifest.absoluteString, "--root", root, "--quiet"])
        try #require(sync.status == 0, "\(sync.stderr)")

        let process = try ChildProcess(OfflinePkgBinary.path, ["serve", "--root", root, "--port", "0"])

        // The first line is the URL, flushed at once.
        let url = (process.firstLine() ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(url.hasPrefix("http://127.0.0.1:") && url.hasSuffix("/"))
        let reply = HTTPReply(try Tool.curl(["-D", "-", "-H", "Host: demo.offlinepkg.test", url + "js/app.js"]).stdout)
        #expect(reply.status == 200)
        #expect(reply.headers["content-type"] == "text/javascript; charset=utf-8")

        process.signal(signal)
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
        #expect(!process.isRunning)
        let stopped = process.wait()
        #expect(!process.endedBySignal && stopped.status == 0)
    }

    @Test(arguments: ["0.0.0.0", "10.0.0.1", "::"])
    func refusesNonLoopbackHostWithUsageStatus(host: String) async throws {
        let scratch = try TemporaryDirectory()
        // A root that exists: on a missing one, serve stops first at "no cache root" (man/offlinepkg.1).
        _ = try scratch.makeDirectory("root")
        let result = await InProcessCLI.run(["serve", "--root", scratch.path("root"), "--host", host])
        #expect(result.status == 2)
        #expect(result.stderr.contains("not a loopback address"))
        #expect(result.stderr.contains("same device"))
    }
}
