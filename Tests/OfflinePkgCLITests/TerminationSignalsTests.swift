import Testing
@testable import OfflinePkgCLI

#if canImport(Glibc)
import Glibc
#endif

/// `serve` and `reports serve` end at SIGINT or SIGTERM. A supervisor, a test or a benchmark may send
/// one the moment the server answers, before any thread has looked for it.
@Suite struct TerminationSignalsTests {
    @Test func aSignalSentAsSoonAsTheyAreTakenIsNotLost() async throws {
        for number in [SIGTERM, SIGINT] {
            let termination = try TerminationSignals()
            kill(getpid(), number)
            for _ in 0..<1000 where !termination.hasFired { try await Task.sleep(for: .milliseconds(10)) }
            #expect(termination.hasFired, "signal \(number) lost")
            if termination.hasFired { await termination.wait() }
        }
    }
}
