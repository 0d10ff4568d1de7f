import Foundation
import OfflinePkgTestSupport
import Testing

/// `kill -9` at every stage of a sync: the root must show the previous set whole (or the new one whole,
/// once the switch happened), and the next sync must complete.
@Suite("Crash safety")
struct CrashSafetyTests {
    static func release(_ version: String) -> (home: [SiteFile], docs: [SiteFile]) {
        (
            [SiteFile("index.html", "home \(version)"), SiteFile("js/app.js", "app \(version)")],
            [
                SiteFile("index.html", "docs \(version)"),
                SiteFile("big.bin", bytes: [UInt8](repeating: UInt8(version.count), count: 300_000)),
            ]
        )
    }

    static func publish(_ repo: TestRepository, _ version: String) throws {
        let files = release(version)
        try repo.add("home", version, routes: ["https://m.example.com/"], files: files.home)
        try repo.add("docs", version, routes: ["https://m.example.com/docs/"], files: files.docs)
        try repo.publish()
    }

    /// The release a root answers with, checked to be one release for every package.
    static func servedRelease(root: String) throws -> String {
        let home = try OfflinePkgBinary.run(["lookup", "https://m.example.com/", "--root", root]).checked("lookup home")
        let docs = try OfflinePkgBinary.run(["lookup", "https://m.example.com/docs/", "--root", root]).checked("lookup docs")
        let homeText = try String(contentsOfFile: home.stdout.trimmingCharacters(in: .newlines), encoding: .utf8)
        let docsText = try String(contentsOfFile: docs.stdout.trimmingCharacters(in: .newlines), encoding: .utf8)
        let homeVersion = homeText.replacingOccurrences(of: "home ", with: "")
        #expect(docsText == "docs \(homeVersion)", "a mix of releases: \(homeText) with \(docsText)")
        return homeVersion
    }

    @Test(arguments: ["after-manifest", "mid-download", "after-unpack", "before-switch", "after-switch"])
    func killedAtAStageLeavesOneWholeSetAndTheNextSyncCompletes(_ failpoint: String) throws {
        let repo = try TestRepository()
        try Self.publish(repo, "1")
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory(prefix: "offlinepkg-crash")
        let manifest = nginx.url("manifest.json").absoluteString
        try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("first sync")
        try Self.publish(repo, "22")

        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = failpoint
        let killed = try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"], environment: environment)
        #expect(killed.status == 128 + SIGKILL, "expected SIGKILL at \(failpoint): \(killed.stderr)")

        let served = try Self.servedRelease(root: root.path)
        #expect(served == (failpoint == "after-switch" ? "22" : "1"))
        let status = try OfflinePkgBinary.run(["status", "--root", root.path, "--json"]).checked("status")
        #expect(status.stdout.contains("\"generation\""))

        try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("sync after the crash")
        #expect(try Self.servedRelease(root: root.path) == "22")
        try OfflinePkgBinary.run(["verify", "--root", root.path]).checked("verify after the crash")
        // No staging is left behind.
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path("staging")).isEmpty)
    }

    @Test func killedAtRandomMomentsOfASlowSync() throws {
        let repo = try TestRepository()
        try Self.publish(repo, "1")
        let nginx = try NginxServer(documentRoot: repo.path, limitRate: 400_000)
        let root = try TemporaryDirectory(prefix: "offlinepkg-crash")
        let manifest = nginx.url("manifest.json").absoluteString
        try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("first sync")
        try Self.publish(repo, "22")
        for delay in [0.05, 0.2, 0.5, 0.8] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: OfflinePkgBinary.path)
            process.arguments = ["sync", manifest, "--root", root.path, "--quiet"]
            try process.run()
            Thread.sleep(forTimeInterval: delay)
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let served = try Self.servedRelease(root: root.path)
            #expect(served == "1" || served == "22")
        }
        try OfflinePkgBinary.run(["sync", manifest, "--root", root.path, "--quiet"]).checked("sync after the crashes")
        #expect(try Self.servedRelease(root: root.path) == "22")
    }
}
