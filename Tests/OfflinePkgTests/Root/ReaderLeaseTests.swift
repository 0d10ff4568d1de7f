import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Reader leases")
struct ReaderLeaseTests {
    @Test func twoStoresInOneProcessHoldTwoLeases() async throws {
        let repo = try LifecycleTests.repo()
        let root = try TemporaryDirectory()
        let url = URL(fileURLWithPath: repo.manifestPath)
        _ = try await Updater(store: try PackageStore(root: root.url, options: .init(watchInterval: 0)), manifestURL: url).sync()
        // A shell that keeps its set until the next launch, and one that follows switches.
        let pinned = try PackageStore(root: root.url, options: .init(watchInterval: 0, activation: .nextLaunch))
        var follower: PackageStore? = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        for version in ["2", "3"] {
            try repo.add("home", version, routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home \(version)")])
            try repo.publish()
            _ = try await Updater(store: follower!, manifestURL: url).sync()
        }
        follower = nil  // its lease goes; the pinned store's must stay
        let removed = try PackageStore(root: root.url, options: .init(watchInterval: 0)).writer.collectGarbage()
        #expect(removed.isEmpty)
        #expect(try LifecycleTests.served(pinned) == "home 1")
        withExtendedLifetime(pinned) {}
    }

    /// A root its user may read but not write (made read-only, or on a read-only mount) still answers
    /// lookups from what is there. The reader is the root's own user: a root is its user's alone
    /// (docs/protocol.md#neighbours-on-the-device), so another user's reads it not at all (`RootPrivacyTests`).
    @Test(.enabled(if: LocalUser.available, "needs root to act as nobody"))
    func aUserWhoCannotWriteTheRootCanStillLookUp() throws {
        let scratch = try TemporaryDirectory()
        chmod(scratch.path, 0o755)
        let root = try scratch.makeDirectory("root")
        try LocalUser.shell.own(root)
        // The checkout may sit in a folder only root can enter (a fresh clone in a mkdtemp folder):
        // give the other user copies it can reach of the binary and of the repository it syncs.
        let bin = try TemporaryDirectory()
        chmod(bin.path, 0o755)
        let binary = bin.path("offlinepkg")
        try FileManager.default.copyItem(atPath: OfflinePkgBinary.path, toPath: binary)
        chmod(binary, 0o755)
        let repo = scratch.path("demo-repo")
        try shell("cp -R '\(Fixtures.url("demo-repo").path)' '\(repo)' && chmod -R a+rX '\(repo)'")
        try LocalUser.shell.run([binary, "sync", repo + "/manifest.json", "--root", root, "--quiet"]).checked()
        // Nothing in it writable any more, by its user either.
        _ = try shell("chmod -R a-w '\(root)'")
        let lookup = try LocalUser.shell.run([binary, "lookup", "https://demo.offlinepkg.test/", "--root", root])
        #expect(lookup.status == 0, "\(lookup.stderr)")
        #expect(lookup.stdout.hasSuffix("index.html\n"))
        let status = try LocalUser.shell.run([binary, "status", "--root", root])
        #expect(status.status == 0, "\(status.stderr)")
    }
}
