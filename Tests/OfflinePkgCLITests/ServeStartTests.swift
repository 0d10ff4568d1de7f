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
}
