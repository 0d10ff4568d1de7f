import Foundation
import Testing

@testable import OfflinePkgCLI

/// The CLI reads its environment from `environ` by bytes, to what `ProcessInfo` gives.
@Suite struct ProcessEnvironmentTests {
    @Test func theEnvironmentIsProcessInfosOwn() {
        let environment = CLIContext.processEnvironment()
        #expect(environment == ProcessInfo.processInfo.environment)
        #expect(environment["PATH"] != nil)
    }
}
