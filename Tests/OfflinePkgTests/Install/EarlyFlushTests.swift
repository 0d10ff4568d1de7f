import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The flush a one-package install starts beside its lanes: its failure is the install's, since a
/// writeback error is told only to the flush that met it.
@Suite("Early flush")
struct EarlyFlushTests {
    @Test func aFlushThatFailedThrowsWhenWaitedFor() throws {
        let scratch = try TemporaryDirectory()
        let missing = scratch.path("no-such-folder")
        let flush = EarlyFlush(of: missing)
        flush.start()
        #expect {
            try flush.wait()
        } throws: { error in
            "\(error)".contains(missing)
        }
    }
}
