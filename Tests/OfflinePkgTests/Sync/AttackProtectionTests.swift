import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The TUF attack list of docs/security.md, each refused with the protection that fired (exit 4 via
/// `.refused`) and the active set untouched.
@Suite("Attack protection")
struct AttackProtectionTests {
    static let files = [SiteFile("index.html", "v1")]

    struct Setup {
        let repo: TestRepository
        let root: TemporaryDirectory
        let store: PackageStore
        let keys: TemporaryDirectory

        init() throws {
            repo = try TestRepository()
            try repo.add("home", "1", routes: ["https://m.example.com/"], files: AttackProtectionTests.files)
            try repo.publish(sequence: 5)
            root = try TemporaryDirectory()
            store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
            keys = try TemporaryDirectory()
            try run("minisign", ["-G", "-W", "-p", keys.path("good.pub"), "-s", keys.path("good.key")]).checked()
            try run("minisign", ["-G", "-W", "-p", keys.path("other.pub"), "-s", keys.path("other.key")]).checked()
        }

        func sign(with key: String = "good", legacy: Bool = false) throws {
            try? FileManager.default.removeItem(atPath: repo.manifestPath + ".minisig")
            try run("minisign", ["-S", "-s", keys.path("\(key).key"), "-m", repo.manifestPath] + (legacy ? ["-l"] : [])).checked()
        }

        func trusted(_ key: String = "good") throws -> [TrustedKey] { [try TrustedKey(contentsOfFile: keys.path("\(key).pub"))] }

        func sync(keys: [TrustedKey] = [], stall: TimeInterval = 30) async throws -> SyncReport {
            try await Updater(
                store: store, manifestURL: URL(fileURLWithPath: repo.manifestPath),
                options: .init(trustedKeys: keys, stallTimeout: stall, retry: .init(attempts: 1))
            ).sync()
        }

        func activeJSON() throws -> String { try String(contentsOfFile: root.path("active.json"), encoding: .utf8) }
    }

    /// Expects a refusal whose message names `protection`.
    static func expectRefused(_ protection: String, _ body: () async throws -> SyncReport) async {
        await #expect {
            _ = try await body()
        } throws: { error in
            (error as? OfflinePkgError)?.category == .refused && "\(error)".contains(protection)
        }
    }

    @Test(arguments: [false, true])
    func stockMinisignSignaturesVerify(legacy: Bool) async throws {
        let setup = try Setup()
        try setup.sign(legacy: legacy)
        #expect(try await setup.sync(keys: setup.trusted()).outcome == .activated)
    }

    @Test func aMissingSignatureIsRefusedWhenKeysAreConfigured() async throws {
        let setup = try Setup()
        await Self.expectRefused("signature check refused") { try await setup.sync(keys: setup.trusted()) }
        #expect(setup.store.activeSet.generation == 0)
    }

    @Test func aSignatureByAnotherKeyIsRefused() async throws {
        let setup = try Setup()
        try setup.sign(with: "other")
        await Self.expectRefused("which is not trusted") { try await setup.sync(keys: setup.trusted()) }
    }

    @Test func aManifestChangedAfterSigningIsRefused() async throws {
        let setup = try Setup()
        try setup.sign()
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: setup.repo.manifestPath))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(" ".utf8))
        try handle.close()
        await Self.expectRefused("wrong signature") { try await setup.sync(keys: setup.trusted()) }
    }

    @Test func rollbackToALowerSequenceIsRefused() async throws {
        let setup = try Setup()
        _ = try await setup.sync()
        let before = try setup.activeJSON()
        try setup.repo.add("home", "0.9", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "old")])
        try setup.repo.publish(sequence: 4)
        await Self.expectRefused("rollback protection refused") { try await setup.sync() }
        #expect(try setup.activeJSON() == before)
    }

    @Test func theSameSequenceWithOtherBytesIsRefused() async throws {
        let setup = try Setup()
        _ = try await setup.sync()
        try setup.repo.add("home", "evil", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "evil")])
        try setup.repo.publish(sequence: 5)
        await Self.expectRefused("sequence 5 was accepted before with other content") { try await setup.sync() }
        #expect(setup.store.resolve("https://m.example.com/").map(\.version) == "1")
    }

    @Test func anExpiredManifestIsRefused() async throws {
        let setup = try Setup()
        try setup.repo.publish(sequence: 6, expires: "2020-01-01T00:00:00Z")
        await Self.expectRefused("freeze protection refused") { try await setup.sync() }
    }

    @Test func endlessDataIsCutOff() async throws {
        let setup = try Setup()
        // A manifest past 16 MiB.
        let huge = [UInt8](repeating: 0x20, count: Manifest.maximumSize + 1)
        try Data(huge).write(to: URL(fileURLWithPath: setup.repo.manifestPath))
        await Self.expectRefused("larger than 16777216 bytes") { try await setup.sync() }
        // A signature past 64 KiB.
        try setup.repo.publish(sequence: 7)
        try Data([UInt8](repeating: 0x41, count: 70_000)).write(to: URL(fileURLWithPath: setup.repo.manifestPath + ".minisig"))
        await Self.expectRefused("larger than 65536 bytes") { try await setup.sync(keys: setup.trusted()) }
    }

    @Test func slowRetrievalIsAbortedByTheStallTimeout() async throws {
        let setup = try Setup()
        let server = try FaultServer(documentRoot: setup.repo.path)
        server.script("/archives/home-1.tar.gz", [.stall(afterBytes: 10, seconds: 30)])
        let start = Date()
        // Refused (exit 4), naming the protection, the archive and the timeout.
        await Self.expectRefused(
            "slow retrieval protection refused http://127.0.0.1:\(server.port)/archives/home-1.tar.gz: stalled: no byte for 1 s"
        ) {
            try await Updater(
                store: setup.store, manifestURL: server.url("manifest.json"),
                options: .init(stallTimeout: 1, retry: .init(attempts: 1))
            ).sync()
        }
        // The server holds the connection for 30 s; giving up long before that is the stall timeout
        // (with slack for a loaded machine running the suite in parallel: 15.6 s was seen once at a load of 5).
        #expect(Date().timeIntervalSince(start) < 25)
    }
}
