import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkgCLI

/// Every command that takes the root's lock (sync, gc, rollback, verify --repair) accepts `--wait`, and
/// only such a command suggests it. The test process holds the lock itself, as another sync would.
@Suite("Waiting for the lock")
struct LockWaitTests {
    /// A root with two releases installed (so rollback has somewhere to go) and a damaged active file
    /// (so verify --repair has something to repair, and takes the lock for it).
    static func device() async throws -> LifecycleCommandTests.Device {
        let device = try LifecycleCommandTests.Device()
        for version in ["1", "2"] {
            try device.release(version)
            try await InProcessCLI.run(["sync", device.repo.manifestPath, "--root", device.root.path, "--quiet"]).checked()
        }
        let index = try await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", device.root.path]).checked()
        let path = String(index.stdout.dropLast())
        chmod(path, 0o644)
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: path))
        return device
    }

    @Test(arguments: [["gc"], ["rollback"], ["verify", "--repair"], ["sync", "MANIFEST"]])
    func aLockedRootExits3SuggestingWaitAndWaitWaits(_ command: [String]) async throws {
        let device = try await Self.device()
        let arguments = command.map { $0 == "MANIFEST" ? device.repo.manifestPath : $0 } + ["--root", device.root.path]
        var lock: FileLock? = try #require(try FileLock(path: device.root.path("lock"), wait: false))
        let refused = await InProcessCLI.run(arguments)
        #expect(refused.status == 3, "\(command): \(refused.stderr)")
        #expect(refused.stderr.contains("another sync holds the lock of \(device.root.path) (use --wait to wait for it)"))

        // With --wait it blocks until the lock is free, then does its work.
        let waiting = try ChildProcess(OfflinePkgBinary.path, arguments + ["--wait"])
        try await Task.sleep(for: .milliseconds(700))
        #expect(waiting.isRunning, "\(command) --wait did not wait for the lock")
        // It says so while it waits, rather than looking hung.
        #expect(
            waiting.stderr.contains("waiting for another sync of \(device.root.path) to finish (--wait)"),
            "\(command) --wait: \(waiting.stderr)")
        lock = nil
        _ = lock
        let deadline = Date().addingTimeInterval(20)
        while waiting.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!waiting.isRunning && waiting.wait().status == 0, "\(command) --wait")
    }

    @Test func onlyACommandThatAcceptsWaitSuggestsIt() {
        let locked = OfflinePkgError.locked(root: "/r")
        for command in OfflinePkgCommand.commands {
            let accepts = command.options.contains { $0.name == "wait" }
            #expect(OfflinePkgCommand.hint(for: locked, in: command).isEmpty == !accepts, "\(command.name)")
        }
        #expect(["sync", "gc", "rollback", "verify"].allSatisfy { name in
            OfflinePkgCommand.commands.first { $0.name == name }!.options.contains { $0.name == "wait" }
        })
        #expect(OfflinePkgCommand.hint(for: .unavailable("x"), in: SyncCommand.spec).isEmpty)
    }
}
