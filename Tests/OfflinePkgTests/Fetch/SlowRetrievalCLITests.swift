import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The same through the command line: the flags, and exit status 4 naming the protection.
@Suite("Slow retrieval through the CLI")
struct SlowRetrievalCLITests {
    @Test func theFlagsSetTheFloorAndTheExitStatusIs4() async throws {
        let setup = try await SlowRetrievalTests.Setup()
        // The CLI retries 4 times (each attempt resumes): every one trickles.
        setup.server.script("/archives/home-2.tar.gz", Array(repeating: SlowRetrievalTests.trickle, count: 6))
        let before = try setup.base.activeJSON()
        let result = await InProcessCLI.run([
            "sync", setup.server.url("manifest.json").absoluteString, "--root", setup.base.root.path, "--quiet",
            "--stall-timeout", "5", "--min-rate", "100", "--min-rate-window", "2",
        ])
        #expect(result.status == 4, "\(result.stderr)")
        #expect(result.stderr.contains("slow retrieval protection refused \(setup.server.url("archives/home-2.tar.gz")): below the minimum rate"))
        #expect(try setup.base.activeJSON() == before)
        #expect(await setup.recorded("/archives/home-2.tar.gz", count: 4).count == 4)
        // A manifest deadline of 0 is a usage error.
        let usage = await InProcessCLI.run(["sync", "x", "--manifest-deadline", "0"])
        #expect(usage.status == 2)
    }
}
