import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The root's queue of install reports (docs/protocol.md#install-reports): bounded with the oldest dropped, whole lines only
/// after a crash, shared by writers that never lose or repeat an event, private files.
@Suite("Report queue")
struct ReportQueueTests {
    /// A root whose reports go to `url` (nothing listens there: the queue only grows).
    struct Root {
        let directory: TemporaryDirectory
        let queue: ReportQueue

        init(url: String? = "http://127.0.0.1:9/reports") throws {
            directory = try TemporaryDirectory(prefix: "offlinepkg-reports")
            let layout = CacheLayout(root: directory.path)
            try layout.prepare()
            queue = ReportQueue(layout: layout)
            queue.target(url: url, shellVersion: "3.2")
        }

        /// Records a confirmation of sequence `sequence`, with `padding` bytes in its error to make it larger.
        func record(_ sequence: Int, padding: Int = 0) {
            queue.record { device, state in
                ReportEvent(
                    device: device, time: Date(), event: .confirmed, sequence: sequence,
                    packages: [.init(id: "home", from: "1", to: "2", via: "cache", bytes: 0)],
                    error: padding > 0 ? String(repeating: "x", count: padding) : nil, shellVersion: state.shellVersion)
            }
        }

        /// The sequences of the queued events, oldest first.
        var sequences: [Int] {
            queue.queued().map { line in
                let object = try! JSONSerialization.jsonObject(with: Data(line)) as! [String: Any]
                return object["sequence"] as! Int
            }
        }
    }

    @Test func pastTwoHundredEventsTheOldestGoFirst() throws {
        let root = try Root()
        for sequence in 1...250 { root.record(sequence) }
        #expect(root.sequences == Array(51...250))
    }

    @Test func pastTwoHundredFiftySixKiBTheOldestGoFirst() throws {
        let root = try Root()
        // About 4 KiB each: 64 fit in 256 KiB.
        for sequence in 1...100 { root.record(sequence, padding: 4000) }
        let size = try #require(FileSystem.fileSize(root.queue.layout.reportQueue))
        #expect(size <= Int64(ReportQueue.maximumBytes))
        #expect(size > Int64(ReportQueue.maximumBytes) - 8192)
        let kept = root.sequences
        #expect(kept.last == 100 && kept == Array((101 - kept.count)...100), "\(kept)")
    }

    /// A writer killed mid-line (or a power cut) leaves a line without its newline: readers skip it and
    /// the next writer rewrites the file without it, so it never glues onto the next event.
    @Test func aTornLineIsSkippedAndDroppedByTheNextWriter() throws {
        let root = try Root()
        root.record(1)
        let path = root.queue.layout.reportQueue
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("{\"device\":\"torn".utf8))
        try handle.close()
        #expect(root.sequences == [1])
        root.record(2)
        #expect(root.sequences == [1, 2])
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(!text.contains("torn") && text.hasSuffix("}\n"), "\(text)")
    }

    /// Eight writers at once, each with its own open file and lock as separate processes have: every
    /// event is there once, every line whole.
    @Test func concurrentWritersLoseAndRepeatNothing() async throws {
        let root = try Root()
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<8 {
                group.addTask {
                    for index in 0..<20 {
                        // Each writer its own ReportQueue value: its own opens and flocks.
                        ReportQueue(layout: root.queue.layout).record { device, _ in
                            ReportEvent(
                                device: device, time: Date(), event: .confirmed, sequence: writer * 100 + index, packages: [])
                        }
                    }
                }
            }
        }
        let sequences = root.sequences
        #expect(sequences.count == 160)
        #expect(Set(sequences) == Set((0..<8).flatMap { writer in (0..<20).map { writer * 100 + $0 } }))
    }

    /// Device ids and errors are the owner's business: the queue, its state and folder are the user's alone.
    @Test func theQueueIsPrivate() throws {
        let root = try Root()
        root.record(1)
        func mode(_ path: String) throws -> Int {
            try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        }
        #expect(try mode(root.queue.layout.reportQueue) == 0o600)
        #expect(try mode(root.queue.layout.reportState) == 0o600)
        #expect(try mode(root.queue.layout.reports) == 0o700)
        root.queue.sent([root.queue.queued()[0]], at: nil)
        root.record(2)
        root.record(3)
        root.queue.sent([root.queue.queued()[0]], at: Date())
        #expect(try mode(root.queue.layout.reportQueue) == 0o600, "rewritten")
    }

    /// What a send took goes; what was recorded meanwhile stays.
    @Test func aSendTakesOnlyWhatItSent() throws {
        let root = try Root()
        root.record(1)
        root.record(2)
        let sent = root.queue.queued()
        root.record(3)
        root.queue.sent(sent, at: Date())
        #expect(root.sequences == [3])
        #expect(root.queue.loadState()?.lastSent != nil)
    }

    /// No URL, no event; turned off, the queue and the state go.
    @Test func withoutATargetNothingIsKept() throws {
        let off = try Root(url: nil)
        off.record(1)
        #expect(off.queue.queued().isEmpty && off.queue.loadState() == nil)
        let on = try Root()
        on.record(1)
        on.queue.forget()
        #expect(!FileSystem.exists(on.queue.layout.reportQueue) && !FileSystem.exists(on.queue.layout.reportState))
        on.record(2)
        #expect(on.queue.queued().isEmpty)
    }
}
