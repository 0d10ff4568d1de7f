import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// A kill inside an atomic write leaves `<file>.tmp-<pid>`: the next sync and `gc` remove those of
/// processes that are gone, and leave those of a live writer (a reader writing `launch.json`) alone.
@Suite("Stray temporaries")
struct StrayTemporaryTests {
    /// The pid of a process that has exited.
    static func deadPID() throws -> Int32 {
        let process = try ChildProcess("/bin/true", [])
        process.wait()
        return process.pid
    }

    @Test(arguments: [["sync"], ["gc"]])
    func theNextSyncAndGCRemoveTheTemporariesOfDeadWriters(_ command: [String]) async throws {
        let device = try LifecycleCommandTests.Device()
        try device.release("1")
        try await device.sync()
        let dead = try Self.deadPID()
        let tree = try #require(try device.trees().first)
        let strays = ["active.json.tmp-\(dead)", "state.json.tmp-\(dead)", "trees/home/\(tree).index.tmp-\(dead)"]
        // This test process is alive: its temporary may be a write in progress.
        let kept = ["launch.json.tmp-\(getpid())", "notes.tmp-x", "tmp-\(dead)"]
        for name in strays + kept { try device.root.write("half-written", to: name) }

        let arguments = command == ["sync"] ? ["sync", device.repo.manifestPath, "--quiet"] : command
        let result = try await device.run(arguments)
        #expect(result.status == 0, "\(result.stderr)")
        for name in strays { #expect(!FileManager.default.fileExists(atPath: device.root.path(name)), "\(name) is left") }
        for name in kept { #expect(FileManager.default.fileExists(atPath: device.root.path(name)), "\(name) was removed") }
        #expect(try await device.served() == "home 1")
    }
}
