import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The running figure of held content (content.json) is believed only when it is right: a session one
/// locked operation left open never carries into the next.
@Suite struct ContentLedgerTests {
    /// A root with an empty `content/` and its ledger's session open, as a sync's first insert leaves it.
    static func openSession() throws -> (TemporaryDirectory, CacheLayout, ContentLedger) {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path("root"))
        try FileSystem.makeDirectories(layout.content)
        let ledger = ContentLedger.of(layout)
        ledger.lockTaken()
        try ledger.willChange()
        return (scratch, layout, ledger)
    }

    /// A sync of a long-lived process (a host app) fails after an insert, before its close; another
    /// process walks and closes the figure; the first process syncs again. Its changes must open the
    /// figure on disk again, or a kill then leaves a closed, wrong figure that no collection walks.
    @Test func aSessionLeftOpenByAFailedSyncDoesNotCarryIntoTheNextLock() throws {
        let (scratch, layout, ledger) = try Self.openSession()
        defer { withExtendedLifetime(scratch) {} }
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

    /// An install of 100k files creates 100k held names: the close counts them from the sizes the
    /// inserts gave, with no walk of `content/` (a stat per held file) and no stat per name. Nothing is
    /// on disk here, so a walk or a stat would count nothing.
    @Test func aSessionCountsManyCreatedNamesFromTheirSizesWithoutAWalk() throws {
        let (scratch, _, ledger) = try Self.openSession()
        defer { withExtendedLifetime(scratch) {} }
        let count = 20_000
        for number in 0..<count { ledger.created(SHA256.hash(Array("file \(number)".utf8)).hex, size: Int64(number % 7)) }
        let walks = ledger.walks
        #expect(try ledger.close(removingOrphans: true).isEmpty)
        #expect(ledger.walks == walks, "the close walked content/")
        let expectedBytes = (0..<count).reduce(Int64(0)) { $0 + Int64($1 % 7) }
        #expect(ledger.closedFigure() == ContentLedger.Figure(files: count, bytes: expectedBytes))
    }

    /// Once a staging tree holding inserted files was discarded (an install that failed and fell back),
    /// the close looks at each created name: the orphan goes, the linked one is counted as it is on disk.
    @Test func aDiscardedStagingTreeMakesTheCloseCollectItsOrphans() throws {
        let scratch = try TemporaryDirectory()
        let layout = CacheLayout(root: scratch.path("root"))
        let store = ContentStore(layout: layout)
        try FileSystem.makeDirectories(layout.content)
        store.ledger.lockTaken()
        let staging = layout.stagingDirectory("failed")
        let installed = scratch.path("tree")
        try FileSystem.makeDirectories(staging)
        try FileSystem.makeDirectories(installed)
        let writer = try TreeWriter(root: staging, replacesFiles: false)
        let kept = SHA256.hash(Array("kept".utf8)).hex, lost = SHA256.hash(Array("lost".utf8)).hex
        for (name, text) in [("kept.txt", "kept"), ("lost.txt", "lost")] {
            try writer.writeFile(name) { try $0.writeAll(Array(text.utf8), path: name) }
            try store.insert(sha256: SHA256.hash(Array(text.utf8)).hex, size: 4, writtenBy: writer, at: PackagePath(name))
        }
        // kept.txt moves on to a tree that stays; the staging tree with lost.txt is given up.
        try FileSystem.rename(staging + "/kept.txt", to: installed + "/kept.txt")
        store.discardStaging(staging)
        #expect(try store.ledger.close(removingOrphans: true).map(\.path) == [store.path(sha256: lost)])
        #expect(store.contains(sha256: kept) && !FileSystem.exists(store.path(sha256: lost)))
        #expect(store.ledger.closedFigure() == ContentLedger.Figure(files: 1, bytes: 4))
    }
}
