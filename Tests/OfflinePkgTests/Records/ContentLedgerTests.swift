import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The running figure of held content (content.json) is believed only when it is right: a session one
/// locked operation left open never carries into the next.
@Suite struct ContentLedgerTests {
    /// A sync of a long-lived process (a host app) fails after an insert, before its close; another
    /// process walks and closes the figure; the first process syncs again. Its changes must open the
    /// figure on disk again, or a kill then leaves a closed, wrong figure that no collection walks.
    @Test func aSessionLeftOpenByAFailedSyncDoesNotCarryIntoTheNextLock() throws {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path("root"))
        try FileSystem.makeDirectories(layout.content)
        let ledger = ContentLedger.of(layout)
        ledger.lockTaken()
        try ledger.willChange()
        ledger.created(String(repeating: "ab", count: 32))
        #expect(ledger.closedFigure() == nil, "an open session's figure was believed")
        // Another process walks and closes it (what `gc` or its own sync does).
        try FileSystem.writeAtomically(JSONCoding.encode(ContentLedger.Figure(files: 1, bytes: 6), pretty: false), to: layout.contentUsage)
        #expect(ledger.closedFigure() == ContentLedger.Figure(files: 1, bytes: 6))
        // This process's next locked operation, about to change content.
        ledger.lockTaken()
        try ledger.willChange()
        #expect(ledger.closedFigure() == nil, "the next change ran under a closed figure")
    }
}
