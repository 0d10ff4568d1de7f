import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `RootModes.tighten` on a root an older build left open (0755 folders, 0644 files): what is the root's
/// is made its user's alone, and a link in it, there from the start or swapped in for a folder while
/// the walk runs, leads nowhere: nothing outside the root changes mode.
@Suite("Root modes")
struct RootModesTests {
    /// A folder outside the root, as another user would aim a link at (`/etc` in the attack), holding
    /// 0644 files named as those of the root's `trees/x`.
    static let names = (0..<64).map { "f\($0)" }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    static func makeOpen(_ folder: String) throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chmod(folder, 0o755)
        for name in names {
            try writeFile(Data("x".utf8), to: folder + "/" + name)
            chmod(folder + "/" + name, 0o644)
        }
    }

    /// What outside has that is no longer 0755/0644.
    static func changed(_ outside: String) -> [String] {
        ([outside] + names.map { outside + "/" + $0 }).filter {
            mode($0) != ($0 == outside ? 0o755 : 0o644)
        }.map { "\(String(mode($0), radix: 8)) \($0)" }
    }

    /// Each opener refuses a root another user owns, to root too (the test runs as root): the store, the
    /// writer and the runtime cache, and none of them makes anything in it.
    @Test(.enabled(if: LocalUser.available, "needs root to give a folder to another user"))
    func everyOpenerRefusesARootAnotherUserOwns() throws {
        let scratch = try TemporaryDirectory()
        let root = try scratch.makeDirectory("root")
        chmod(root, 0o777)
        try LocalUser.hostile.own(root)
        let url = URL(fileURLWithPath: root)
        let errors = [
            #expect(throws: OfflinePkgError.self) { try PackageStore(root: url, options: .init(watchInterval: 0)) },
            #expect(throws: OfflinePkgError.self) { try CacheRoot(creating: root) },
            #expect(throws: OfflinePkgError.self) { try RuntimeCache(root: url) },
        ]
        for error in errors {
            #expect(
                "\(error.map { "\($0)" } ?? "")".contains("cache root \(root) is owned by uid"), "\(String(describing: error))")
            #expect("\(error.map { "\($0)" } ?? "")".contains("(opk-b)"))
        }
        #expect(FileSystem.contents(of: root).isEmpty)
    }

    @Test func aLinkToAFolderOutsideIsLeftAloneWhileRealEntriesAreTightened() throws {
        let scratch = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        try Self.makeOpen(outside.path("dir"))
        let root = scratch.path("root")
        try Self.makeOpen(root + "/trees/real")
        try writeFile(Data("{}".utf8), to: root + "/state.json")
        chmod(root + "/state.json", 0o644)
        chmod(root + "/trees", 0o755)
        chmod(root, 0o755)
        try FileManager.default.createSymbolicLink(atPath: root + "/trees/x", withDestinationPath: outside.path("dir"))

        RootModes.tighten(CacheLayout(root: root))

        #expect(Self.changed(outside.path("dir")).isEmpty, "outside changed: \(Self.changed(outside.path("dir")))")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: root + "/trees/x") == outside.path("dir"))
        for folder in ["", "/trees", "/trees/real"] { #expect(Self.mode(root + folder) == 0o700, "\(folder)") }
        for file in ["/state.json"] + Self.names.map({ "/trees/real/" + $0 }) {
            #expect(Self.mode(root + file) == 0o600, "\(file)")
        }
    }

    /// Another user who could change a folder in the root (an older build's, written into by root)
    /// swaps it for a link to a folder outside, again and again, while the root is tightened. A walk by
    /// path (`lstat`, then the folder's names and `chmod` by path) follows the link it meets between
    /// two of those calls; one by descriptor never does. Bounded: 400 walks or 5 s.
    @Test func aFolderSwappedForALinkDuringTheWalkIsNeverFollowed() throws {
        let scratch = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        try Self.makeOpen(outside.path("dir"))
        let root = scratch.path("root")
        let x = root + "/trees/x"
        try Self.makeOpen(x)
        let race = Race()
        let racer = Thread {
            while !race.stop.load(ordering: .relaxed) {
                guard rename(x, x + ".held") == 0 else { break }
                symlink(outside.path("dir"), x)
                usleep(20)
                unlink(x)
                rename(x + ".held", x)
                race.swaps.add(1, ordering: .relaxed)
                usleep(20)
            }
        }
        racer.start()
        let deadline = Date().addingTimeInterval(5)
        var walks = 0
        while walks < 400 && Date() < deadline && Self.changed(outside.path("dir")).isEmpty {
            chmod(root, 0o755)  // open again: the next tighten walks the whole root
            RootModes.tighten(CacheLayout(root: root))
            walks += 1
        }
        race.stop.store(true, ordering: .relaxed)
        while !racer.isFinished { usleep(1000) }

        let changed = Self.changed(outside.path("dir"))
        #expect(changed.isEmpty, "after \(walks) walks, \(race.swaps.load(ordering: .relaxed)) swaps: \(changed.prefix(5))")
        #expect(race.swaps.load(ordering: .relaxed) > 0, "the racer never swapped")
        // The folder itself, back in place, is tightened like any other.
        chmod(root, 0o755)
        RootModes.tighten(CacheLayout(root: root))
        #expect(Self.mode(x) == 0o700)
        for name in Self.names { #expect(Self.mode(x + "/" + name) == 0o600, "\(name)") }
    }

    /// What the racer thread and the test share.
    final class Race: Sendable {
        let stop = Atomic<Bool>(false)
        let swaps = Atomic<Int>(0)
    }
}
