import Testing
@testable import OfflinePkgCLI

#if canImport(Glibc)
import Glibc
#endif

/// `serve` and `reports serve` end at SIGINT or SIGTERM. A supervisor, a test or a benchmark may send
/// one the moment the server answers, before any thread has looked for it.
@Suite(.serialized) struct TerminationSignalsTests {
    @Test func aSignalSentAsSoonAsTheyAreTakenIsNotLost() async throws {
        for number in [SIGTERM, SIGINT] {
            let termination = try TerminationSignals()
            kill(getpid(), number)
            for _ in 0..<1000 where !termination.hasFired { try await Task.sleep(for: .milliseconds(10)) }
            #expect(termination.hasFired, "signal \(number) lost")
            if termination.hasFired { await termination.wait() }
        }
    }

    /// A command run in process (the tests, a host) leaves SIGTERM as it found it, and the older of
    /// two leaves the newer its signals.
    @Test func theDefaultActionComesBackWhenTheLastGoes() async throws {
        var older: TerminationSignals? = try TerminationSignals()
        let newer = try TerminationSignals()
        older = nil
        try await Task.sleep(for: .milliseconds(100))
        #expect(!Self.isDefault(SIGTERM), "the older one's end took the newer one's signals away")
        withExtendedLifetime(older) {}
        _ = consume newer
        for _ in 0..<500 where !Self.isDefault(SIGTERM) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(Self.isDefault(SIGTERM) && Self.isDefault(SIGINT))
    }

    private static func isDefault(_ number: Int32) -> Bool {
        var action = sigaction()
        sigaction(number, nil, &action)
        return action.__sigaction_handler.sa_handler == nil
    }
}
