import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// The field-lifecycle commands through the real binary: rollback, gc, verify --repair, and the sync
/// options that gate or skip a release (--shell-version, --min-interval, --jitter).
@Suite("Lifecycle commands")
struct LifecycleCommandTests {
    /// A cache root and the repository it syncs from, driven through `offlinepkg`.
    struct Device {
        let repo: TestRepository
        let root: TemporaryDirectory

        init() throws {
            repo = try TestRepository()
            root = try TemporaryDirectory()
        }

        /// Adds `home <version>`, whose index.html says "home <version>", and publishes.
        func release(_ version: String, extra: [String: Any] = [:]) throws {
            try repo.add(
                "home", version, routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home \(version)")],
                extra: extra)
            try repo.publish()
        }

        /// Runs `offlinepkg` on a thread of its own: waiting for the child must not tie up a thread of the
        /// cooperative pool, which the library's and other tests' tasks need.
        @discardableResult
        func run(_ arguments: [String]) async throws -> ProcessResult {
            let arguments = arguments + ["--root", root.path]
            return await InProcessCLI.run(arguments)
        }

        func sync(_ options: [String] = [], from manifest: String? = nil) async throws {
            try await run(["sync", manifest ?? repo.manifestPath, "--quiet"] + options).checked("sync")
        }

        /// What `lookup` answers for the home page: the file's text, or nil on a miss (exit 1).
        func served() async throws -> String? {
            let lookup = try await run(["lookup", "https://m.example.com/"])
            guard lookup.status == 0 else { return nil }
            return try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8)
        }

        func status() async throws -> StoreStatus {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return try decoder.decode(StoreStatus.self, from: Data(try await run(["status", "--json"]).checked().stdout.utf8))
        }

        /// The installed trees of `home` (folders under R/trees/home), by name.
        func trees() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: root.path("trees/home")).filter { !$0.hasSuffix(".index") && !$0.hasSuffix(".lookup") }
                .sorted()
        }
    }

    @Test func rollbackServesTheFormerReleaseAndASyncKeepsIt() async throws {
        let device = try Device()
        try device.release("1")
        try await device.sync()
        try device.release("2")
        try await device.sync()
        #expect(try await device.served() == "home 2")

        let rollback = try await device.run(["rollback"])
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(rollback.stdout == "active: set 3: home 1\n")
        #expect(try await device.served() == "home 1")
        let status = try await device.status()
        #expect(status.active.generation == 3 && status.active.packages.map(\.version) == ["1"])
        #expect(status.previous?.generation == 2 && status.previous?.packages.map(\.version) == ["2"])
        #expect(status.reverted == ["home": "2"])

        // The same manifest again: nothing to do, release 1 stays.
        try await device.sync()
        #expect(try await device.served() == "home 1")
        #expect(try await device.status().active.generation == 3)
        // The same release republished (a new sequence, so the manifest is judged again): held back.
        try device.repo.publish()
        try await device.sync()
        #expect(try await device.served() == "home 1")
        let after = try await device.status()
        #expect(after.active.generation == 3 && after.acceptedSequence == 3)
        #expect(
            after.heldBack.map { "\($0.id) \($0.version): \($0.reason)" } == [
                "home 2: rolled back by hand (offlinepkg rollback): taken again only when the manifest offers another version"
            ])
    }

    /// After a rollback the set before the active one is the release just left: a second rollback
    /// does not switch back to it (nothing older is kept), and a dry run says the release was rolled
    /// back by hand, not that it never launched.
    @Test func aSecondRollbackDoesNotReactivateTheReleaseItLeft() async throws {
        let device = try Device()
        for version in ["1", "2"] {
            try device.release(version)
            try await device.sync()
        }
        try await device.run(["rollback"]).checked("first rollback")
        #expect(try await device.served() == "home 1")
        let dry = try await device.run(["sync", device.repo.manifestPath, "--dry-run"]).checked("dry run")
        #expect(
            dry.stdout.contains(
                "held back home 2: rolled back by hand (offlinepkg rollback): taken again only when the manifest offers another version"),
            "\(dry.stdout)")
        #expect(!dry.stdout.contains("never confirmed to launch"))

        let second = try await device.run(["rollback"])
        #expect(second.status == 1, "\(second.stdout)")
        #expect(second.stderr.contains("set 3 is already a rollback from set 2 (home 2)"), "\(second.stderr)")
        #expect(try await device.served() == "home 1")
        #expect(try await device.status().active.generation == 3)

        // Once a sync has moved on, rollback goes back one step again.
        try device.release("3")
        try await device.sync()
        #expect(try await device.served() == "home 3")
        try await device.run(["rollback"]).checked("rollback after a new release")
        #expect(try await device.served() == "home 1")
    }

    @Test func rollbackWithoutAPreviousSetFailsAndChangesNothing() async throws {
        let device = try Device()
        let empty = try await device.run(["rollback"])
        #expect(empty.status == 1)
        #expect(empty.stderr.contains("no previous active set to roll back to in "))
        try device.release("1")
        try await device.sync()
        let single = try await device.run(["rollback"])
        #expect(single.status == 1)
        #expect(single.stderr.contains("no previous active set to roll back to in "))
        #expect(try await device.served() == "home 1")
        #expect(try await device.status().active.generation == 1)
    }

    @Test func gcRemovesATreeNoSetUsesAndKeepsTheActiveAndPreviousOnes() async throws {
        let device = try Device()
        try device.release("1")
        try await device.sync()
        // A shell that read release 1 and never reloaded: its lease keeps tree 1 through the syncs' own
        // clean-up, so that tree is still on disk, unused by any set, when the shell goes.
        var shell: PackageStore? = try PackageStore(root: device.root.url, options: .init(watchInterval: 0))
        for version in ["2", "3"] {
            try device.release(version)
            try await device.sync()
        }
        #expect(shell?.activeSet.generation == 1)
        let before = try device.trees()
        #expect(before.map { $0.prefix(2) } == ["1-", "2-", "3-"])
        shell = nil
        let gc = try await device.run(["gc"])
        #expect(gc.status == 0, "\(gc.stderr)")
        #expect(gc.stdout == "removed \(device.root.path)/trees/home/\(before.first ?? "")\n")
        #expect(try device.trees() == Array(before.dropFirst()))
        #expect(try await device.served() == "home 3")
        let rollback = try await device.run(["rollback"])
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(try await device.served() == "home 2")
    }

    @Test func verifyNamesAChangedByteAndRepairRestoresTheFile() async throws {
        let device = try Device()
        try device.release("1")
        try await device.sync()
        let path = String(try await device.run(["lookup", "https://m.example.com/"]).checked().stdout.dropLast())
        let original = try Data(contentsOf: URL(fileURLWithPath: path))
        chmod(path, 0o644)  // installed trees are read-only
        var bytes = original
        bytes[0] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: path))

        let verify = try await device.run(["verify"])
        #expect(verify.status == 4)
        #expect(verify.stderr.contains("damaged: home 1: index.html: sha256 "))
        let repair = try await device.run(["verify", "--repair"])
        #expect(repair.status == 0, "\(repair.stderr)")
        #expect(repair.stderr.contains("repaired: home"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == original)
        let again = try await device.run(["verify"])
        #expect(again.status == 0 && again.stdout == "ok: 1 active package(s) match their tree hashes\n")
    }

    @Test func shellVersionHoldsAPackageBackUntilTheShellIsNewEnough() async throws {
        let device = try Device()
        try device.release("2", extra: ["minShellVersion": "3.0"])
        try await device.sync(["--shell-version", "2.9"])
        #expect(try await device.served() == nil)
        let status = try await device.run(["status"]).checked().stdout
        #expect(status.contains("held back: home 2: needs shell 3.0, this shell is 2.9"))
        try await device.sync(["--shell-version", "3.0"])
        #expect(try await device.served() == "home 2")
        #expect(!(try await device.run(["status"]).checked().stdout.contains("held back")))
    }

    @Test func minIntervalSkipsTheRequestThatAPlainSyncMakes() async throws {
        let device = try Device()
        try device.release("1")
        let nginx = try NginxServer(documentRoot: device.repo.path)
        let manifest = nginx.url("manifest.json").absoluteString
        try await device.sync(from: manifest)
        let count = nginx.waitForRequests(2).count  // the manifest and the archive
        #expect(count == 2)
        let skipped = try await device.run(["sync", manifest, "--min-interval", "3600"]).checked()
        #expect(skipped.stdout == "skipped: checked less than --min-interval ago\n")
        try await Task.sleep(nanoseconds: 200_000_000)  // nginx writes its log line after the response
        #expect(nginx.accessLog().count == count)
        try await device.sync(from: manifest)
        let log = nginx.waitForRequests(count + 1)
        #expect(log.count == count + 1 && log.last?.uri == "/manifest.json" && log.last?.status == 304)
    }

    /// A small jitter: the sync runs after its wait.
    @Test func jitterIsAcceptedAndTheSyncRunsAfterIt() async throws {
        let device = try Device()
        try device.release("1")
        try await device.sync(["--jitter", "0.05"])
        #expect(try await device.served() == "home 1")
    }

    /// The wait comes before any request. The draw is random in 0...S; with S = 10^6 s, the chance that
    /// it falls in the 1.5 s watched is 1.5 in a million.
    @Test func jitterWaitsBeforeTheFirstRequest() async throws {
        let device = try Device()
        try device.release("1")
        let nginx = try NginxServer(documentRoot: device.repo.path)
        let process = try ChildProcess(
            OfflinePkgBinary.path,
            ["sync", nginx.url("manifest.json").absoluteString, "--jitter", "1000000", "--quiet", "--root", device.root.path])
        try await Task.sleep(nanoseconds: 1_500_000_000)
        #expect(process.isRunning)
        #expect(nginx.accessLog().isEmpty)
        process.signal(SIGTERM)
        try await runBlocking { process.wait() }
    }
}
