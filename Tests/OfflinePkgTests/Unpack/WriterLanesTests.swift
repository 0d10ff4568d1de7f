import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg

/// The unpacker writes files on lanes of their own (`WriterLanes`): the tree is the same
/// whatever the number of lanes, `verify` hashes the very tree `unpack` writes, and a large file streams
/// through a lane in pieces instead of being held whole in memory (`UnpackThreadTests` watches the
/// lanes run on threads of their own).
@Suite("Writer lanes")
struct WriterLanesTests {
    /// 30 folders of 10 files, and a 600 KiB file that crosses the whole-file limit.
    static func site(in dir: TemporaryDirectory) throws -> String {
        var files = [SiteFile]()
        for folder in 0..<30 {
            for n in 0..<10 { files.append(SiteFile("a/d\(folder)/f\(n).txt", "folder \(folder) file \(n)\n")) }
        }
        files.append(SiteFile("big/blob.bin", bytes: (0..<(600 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }))
        try writeSite(files, to: dir.path("site"))
        return dir.path("site")
    }

    @Test(arguments: ["-z", "--zstd", "--format=zip"])
    func everyLaneCountUnpacksTheSameTree(option: String) throws {
        let dir = try TemporaryDirectory()
        let site = try Self.site(in: dir)
        let archive = dir.path("a")
        try run("bsdtar", ["-c", option, "-f", archive, "-C", site, "."]).checked()
        var trees = [[PackagePath: TreeFile]]()
        for lanes in [0, 1, 2, 4] {
            let staging = try dir.makeDirectory("staging-\(lanes)")
            var unpacker = ArchiveUnpacker(limits: .init(), archiveName: "a")
            unpacker.laneCount = lanes
            let tree = try unpacker.unpack(archivePath: archive, into: staging)
            trees.append(tree.files)
            #expect(tree.files.count == 301)
            #expect(tree.folders.contains("a/d29") && tree.folders.contains("big"))
            let verified = try unpacker.verify(archivePath: archive)
            #expect(verified.files == tree.files && verified.folders == tree.folders)
            // What is on disk is what was hashed, byte for byte the site.
            for (path, file) in tree.files {
                #expect(try FileHasher.sha256(ofFile: staging + "/" + path.string) == file.sha256, "\(path)")
                #expect(try FileHasher.sha256(ofFile: site + "/" + path.string) == file.sha256, "\(path)")
            }
        }
        #expect(trees.allSatisfy { $0 == trees[0] })
    }

    /// A file nested 300 folders deep unpacks holding a few dozen descriptors, not one per level: a
    /// writer that kept them all failed on devices under the usual soft limit of 1,024 open files at
    /// 1,000 levels and more ("too many open files", exit 1 at every sync), while the publisher's
    /// `verify`, which opens no folder, accepted the release. Counted while the deep file is kept, its
    /// folder chain still open; 300 levels keep the test's memory small beside the suites that bound it.
    @Test func aDeeplyNestedFileUnpacksWithABoundedChainOfDescriptors() throws {
        let dir = try TemporaryDirectory()
        let deep = Array(repeating: "a", count: 300).joined(separator: "/")
        try writeSite([SiteFile("index.html", "top\n"), SiteFile(deep + "/f.txt", "deep\n")], to: dir.path("site"))
        try run("bsdtar", ["-c", "-z", "-f", dir.path("a.tar.gz"), "-C", dir.path("site"), "."]).checked()
        let staging = try dir.makeDirectory("staging")
        let opened = Mutex<Int?>(nil)
        var unpacker = ArchiveUnpacker(
            limits: .init(), archiveName: "deep",
            keepFile: { _, path, _ in
                guard path.string.hasSuffix("/f.txt") else { return }
                let below = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").filter { fd in
                    let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd)
                    return target?.hasPrefix(staging + "/") == true
                }
                opened.withLock { $0 = below.count }
            })
        unpacker.laneCount = 0
        let tree = try unpacker.unpack(archivePath: dir.path("a.tar.gz"), into: staging)
        #expect(tree.files[PackagePath(deep + "/f.txt")]?.size == 5)
        let count = try #require(opened.withLock { $0 }, "the deep file was never kept")
        #expect(count <= TreeWriter.chainLimit + 1, "\(count) descriptors open below staging")
    }

    /// A folder met first goes to the lane with the fewest bytes queued, and keeps its lane: while one
    /// lane is held up with files queued, every new folder goes to another, where hashing folders to
    /// lanes sent about half of them to the held-up one, the reader then waiting on it while the other
    /// lane had nothing to write.
    @Test func aNewFolderGoesToTheLaneWithTheFewestBytesQueued() throws {
        let dir = try TemporaryDirectory()
        let release = DispatchSemaphore(value: 0)
        let lanes = try WriterLanes(
            target: .tree(root: dir.path, replacesFiles: false), count: 2, archiveName: "a",
            bounds: UnpackBounds(archiveName: "a", limits: .init()),
            keepFile: { _, path, _ in if path == "slow/first.txt" { release.wait() } })
        defer {
            release.signal()
            lanes.stop()
        }
        let slow = lanes.lane(for: "slow")
        let bytes = Array("queued\n".utf8)
        for name in ["first", "second", "third"] {
            try lanes.send(.file(PackagePath("slow/\(name).txt"), raw: PackagePath("slow/\(name).txt"), bytes), to: slow)
        }
        // The slow lane is held in its first file's keepFile: at least the third file is still queued.
        for n in 0..<16 {
            #expect(lanes.lane(for: PackagePath("new\(n)")) != slow, "new\(n)")
        }
        #expect(lanes.lane(for: "slow") == slow)
        release.signal()
        let files = try lanes.finish()
        #expect(Set(files.keys) == ["slow/first.txt", "slow/second.txt", "slow/third.txt"])
    }

    /// A file five times the memory bound unpacks, and verifies: it went through its lane in pieces,
    /// each let go of once written (or hashed), even while the reader keeps the queue from draining.
    @Test(arguments: [false, true])
    func aFileLargerThanTheMemoryBoundStreamsThroughItsLane(verifying: Bool) throws {
        let dir = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: dir.path("site"), withIntermediateDirectories: true)
        try run("sh", ["-c", "head -c \(160 << 20) /dev/zero > \(dir.path("site/zeros.bin"))"]).checked()
        try run("bsdtar", ["-czf", dir.path("a.tar.gz"), "-C", dir.path("site"), "."]).checked()
        let staging = try dir.makeDirectory("staging")
        var unpacker = ArchiveUnpacker(limits: UnpackLimits(maxMemoryGrowth: 32 << 20), archiveName: "a")
        unpacker.laneCount = 2
        let tree =
            verifying
            ? try unpacker.verify(archivePath: dir.path("a.tar.gz"))
            : try unpacker.unpack(archivePath: dir.path("a.tar.gz"), into: staging)
        #expect(try FileManager.default.contentsOfDirectory(atPath: staging).isEmpty == verifying)
        #expect(tree.files["zeros.bin"]?.size == 160 << 20)
        #expect(tree.files["zeros.bin"]?.sha256 == (try FileHasher.sha256(ofFile: dir.path("site/zeros.bin"))))
    }

    /// An unpack that starts while another runs in the process writes on its own reading thread, so the
    /// lanes of unpacks side by side (`--jobs`) stay within the cores; alone, it gets its lanes. The
    /// budget is given back whether the unpack succeeds or is refused.
    @Test func anUnpackBesideAnotherWritesWithoutLanes() throws {
        let dir = try TemporaryDirectory()
        let site = try Self.site(in: dir)
        let archive = dir.path("a.tar.gz")
        try run("bsdtar", ["-czf", archive, "-C", site, "."]).checked()
        let budget = LaneBudget()
        var unpacker = ArchiveUnpacker(limits: .init(), archiveName: "a")
        unpacker.laneBudget = budget

        let alone = try unpacker.unpack(archivePath: archive, into: try dir.makeDirectory("alone"))
        #expect(alone.writerThreads == WriterLanes.defaultCount)

        // Another unpack holds its lanes.
        #expect(budget.begin(wanted: WriterLanes.defaultCount) == WriterLanes.defaultCount)
        let beside = try unpacker.unpack(archivePath: archive, into: try dir.makeDirectory("beside"))
        #expect(beside.writerThreads == 0)
        #expect(beside.files == alone.files)
        // A refused unpack gives its share back too.
        let link = try dir.makeDirectory("link-site")
        try run("sh", ["-c", "echo x > \(link)/a.txt && ln -s /etc/passwd \(link)/passwd"]).checked()
        try run("bsdtar", ["-czf", dir.path("link.tar.gz"), "-C", link, "."]).checked()
        let bad = try dir.makeDirectory("bad")
        #expect(throws: OfflinePkgError.self) { try unpacker.unpack(archivePath: dir.path("link.tar.gz"), into: bad) }
        budget.end()

        let again = try unpacker.unpack(archivePath: archive, into: try dir.makeDirectory("again"))
        #expect(again.writerThreads == WriterLanes.defaultCount)
    }

    /// At most `unpacksAtOnce` unpacks read at once (a sync's budget: one): an unpack that starts while
    /// another holds the turn waits for its end, then runs alone, with its lanes. The deadline counts
    /// from its turn, not from its call: it does not run out while waiting.
    @Test func anUnpackWaitsForItsTurn() throws {
        #expect(LaneBudget.shared.unpacksAtOnce == 1)
        let dir = try TemporaryDirectory()
        try writeSite([SiteFile("big/blob.bin", "one small file\n")], to: dir.path("site"))
        let archive = dir.path("a.tar.gz")
        try run("bsdtar", ["-czf", archive, "-C", dir.path("site"), "."]).checked()
        let budget = LaneBudget(unpacksAtOnce: 1)
        var unpacker = ArchiveUnpacker(limits: .init(deadline: 1), archiveName: "a")
        unpacker.laneBudget = budget
        let staging = try dir.makeDirectory("waited")

        // Another unpack holds the turn.
        #expect(budget.begin(wanted: WriterLanes.defaultCount) == WriterLanes.defaultCount)
        let outcome = Mutex<Result<Int, any Error>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        nonisolated(unsafe) let waiting = unpacker
        Thread.detachNewThread {
            let result = Result { try waiting.unpack(archivePath: archive, into: staging).writerThreads }
            outcome.withLock { $0 = result }
            finished.signal()
        }
        #expect(finished.wait(timeout: .now() + 1.5) == .timedOut)
        #expect(outcome.withLock { $0 } == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: staging).isEmpty)

        budget.end()
        #expect(finished.wait(timeout: .now() + 60) == .success)
        let lanes = try #require(try outcome.withLock { $0 }?.get())
        #expect(lanes == WriterLanes.defaultCount)
        #expect(FileManager.default.fileExists(atPath: staging + "/big/blob.bin"))
    }
}
