import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The key paths as an ordinary user, as a host app runs them: root skips the permission checks that
/// a read-only tree meets when it is moved, swapped or removed, so every test here runs the binary as
/// `nobody` (through `setpriv`) on a root that `nobody` owns. Under a non-root test run the binary
/// runs as that user directly. The repository is served over HTTP by the test process.
@Suite("Unprivileged user")
struct UnprivilegedUserTests {
    /// A root owned by nobody, in a folder nobody can reach, and a repository published by the real
    /// `publish` with a 64 KiB asset that every version shares, so that updates come as deltas.
    struct Device {
        let scratch: TemporaryDirectory
        let server: FaultServer
        var root: String { scratch.path("root") }
        var manifest: String { server.url("repo/manifest.json").absoluteString }

        init() throws {
            scratch = try TemporaryDirectory(prefix: "offlinepkg-nobody")
            // mkdtemp makes 0700 folders: nobody must be able to pass through to its root.
            chmod(scratch.path, 0o755)
            try scratch.write(Array((0..<(64 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }), to: "site/asset.bin")
            try scratch.makeDirectory("site/js")
            try scratch.write("app", to: "site/js/app.js")
            try scratch.makeDirectory("root")
            if getuid() == 0 {
                let nobody = try #require(getpwnam("nobody")).pointee
                #expect(chown(scratch.path("root"), nobody.pw_uid, nobody.pw_gid) == 0)
            }
            server = try FaultServer(documentRoot: scratch.path)
            // The binary under .build must be reachable and executable by nobody.
            let version = try Self.asUser([OfflinePkgBinary.path, "--version"])
            try #require(
                version.status == 0,
                "nobody cannot run \(OfflinePkgBinary.path) (every folder on its path needs o+x): \(version.stderr)")
        }

        /// Runs `command` as nobody (when this process is root; as is, otherwise).
        static func asUser(_ command: [String], environment: [String: String]? = nil) throws -> ProcessResult {
            if getuid() != 0 { return try run(command[0], Array(command.dropFirst()), environment: environment) }
            return try run("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups"] + command, environment: environment)
        }

        @discardableResult
        func offlinepkg(_ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessResult {
            let command = [OfflinePkgBinary.path] + arguments + ["--root", root]
            return try await runBlocking { try Self.asUser(command, environment: environment) }
        }

        /// Publishes `home <version>` (as the test process: the publisher is not the device).
        func publish(_ version: String) async throws {
            try scratch.write("home \(version)", to: "site/index.html")
            try await InProcessCLI.run([
                "publish", scratch.path("site"), "--repo", scratch.path("repo"), "--id", "home", "--version", version,
                "--route", "https://m.example.com/",
            ]).checked("publish \(version)")
        }

        func sync() async throws -> [String: Any] {
            let result = try await offlinepkg(["sync", manifest, "--json", "--quiet"])
            try #require(result.status == 0, "sync as nobody exited \(result.status): \(result.stderr)")
            return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        }

        /// The home page's text as `lookup` (run as nobody) answers it.
        func served() async throws -> String {
            let lookup = try await offlinepkg(["lookup", "https://m.example.com/"])
            try #require(lookup.status == 0, "lookup as nobody exited \(lookup.status): \(lookup.stderr)")
            return try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8)
        }

        func trees() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: scratch.path("root/trees/home")).filter { !$0.hasSuffix(".index") && !$0.hasSuffix(".lookup") }
                .sorted()
        }

        func mode(_ path: String) -> mode_t {
            var info = stat()
            return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
        }
    }

    @Test func syncDeltaLookupRollbackAndGC() async throws {
        let device = try Device()
        try await device.publish("1")
        let cold = try await device.sync()
        #expect(cold["outcome"] as? String == "activated")
        #expect(try await device.served() == "home 1")
        // Installed trees are read-only, and owned by the user who synced, who alone may read them.
        let first = try #require(try device.trees().first)
        #expect(device.mode(device.scratch.path("root/trees/home/\(first)")) == 0o500)
        #expect(device.mode(device.scratch.path("root/trees/home/\(first)/js")) == 0o500)

        // A delta update: the unchanged files are hard links into the read-only tree of version 1.
        try await device.publish("2")
        let update = try await device.sync()
        let changes = try #require(update["changes"] as? [[String: Any]])
        #expect(changes.first?["via"] as? String == "delta", "\(update)")
        #expect(try await device.served() == "home 2")
        // Both trees' asset is the one held inode in content/, linked by nobody (fs.protected_hardlinks
        // lets a user link the files it owns).
        let trees = try device.trees()
        let asset = try FileSystem.read(device.scratch.path("site/asset.bin"), limit: 1 << 20)
        let held = CacheLayout(root: device.root).content(sha256: SHA256.hash(asset).hex)
        for tree in trees {
            #expect(ContentStoreTests.inode(device.scratch.path("root/trees/home/\(tree)/asset.bin")).ino == ContentStoreTests.inode(held).ino)
        }
        #expect(trees.count == 2 && ContentStoreTests.inode(held).links == 3)

        try await device.publish("3")
        _ = try await device.sync()
        #expect(try device.trees().count == 2, "gc at the end of the sync keeps the active and the previous tree")
        let rollback = try await device.offlinepkg(["rollback"])
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(try await device.served() == "home 2")
        // A sync killed before its switch leaves the read-only tree of 4 installed but unused: gc (as
        // nobody) removes it, and keeps the active (2) and previous (3) trees.
        try await device.publish("4")
        var environment = ProcessInfo.processInfo.environment
        environment["OFFLINEPKG_FAILPOINT"] = "before-switch"
        let killed = try await device.offlinepkg(["sync", device.manifest, "--quiet"], environment: environment)
        #expect(killed.status == 128 + SIGKILL, "\(killed.stderr)")
        #expect(try device.trees().count == 3)
        let gc = try await device.offlinepkg(["gc", "--json"])
        #expect(gc.status == 0, "\(gc.stderr)")
        #expect(try device.trees().count == 2)
        #expect(try await device.served() == "home 2")
        _ = try await device.sync()
        #expect(try await device.served() == "home 4")
    }

    /// A user who cannot make the default root (a HOME it may not write, as `sudo -u` leaves it) is told
    /// that it is the cache root and how to give another; so is one whose root it may only read.
    @Test func aRootThisUserCannotWriteIsNamedAsTheCacheRoot() async throws {
        let device = try Device()
        try await device.publish("1")
        let home = try device.scratch.makeDirectory("someone-else")
        chmod(home, 0o555)
        let defaulted = try await runBlocking {
            try Device.asUser([OfflinePkgBinary.path, "sync", device.manifest, "--quiet"], environment: ["HOME": home, "PATH": "/usr/bin:/bin"])
        }
        #expect(defaulted.status == 1)
        #expect(
            defaulted.stderr.contains("cannot write the cache root \(home)/.local/share/offlinepkg (mkdir \(home)/.local: Permission denied)"),
            "\(defaulted.stderr)")
        #expect(defaulted.stderr.contains("--root DIR or OFFLINEPKG_ROOT"), "\(defaulted.stderr)")

        // A root this user owns but may not write; one root owns is another user's, refused as such.
        let readOnly = try device.scratch.makeDirectory("read-only-root")
        chmod(readOnly, 0o555)
        if getuid() == 0 {
            let foreign = try await runBlocking {
                try Device.asUser([OfflinePkgBinary.path, "sync", device.manifest, "--quiet", "--root", readOnly])
            }
            #expect(foreign.status == 1 && foreign.stderr.contains("is owned by uid 0 (root)"), "\(foreign.stderr)")
            let nobody = try #require(getpwnam("nobody")).pointee
            #expect(chown(readOnly, nobody.pw_uid, nobody.pw_gid) == 0)
        }
        let refused = try await runBlocking {
            try Device.asUser([OfflinePkgBinary.path, "sync", device.manifest, "--quiet", "--root", readOnly])
        }
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("cannot write the cache root \(readOnly) ("), "\(refused.stderr)")
    }

    @Test func verifyRepairSwapsADamagedReadOnlyTree() async throws {
        let device = try Device()
        try await device.publish("1")
        _ = try await device.sync()
        let tree = device.scratch.path("root/trees/home/\(try #require(try device.trees().first))")
        // Damage a file as something other than offlinepkg would (here, the test as root).
        chmod(tree + "/js/app.js", 0o644)
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: tree + "/js/app.js"))
        #expect(try await device.offlinepkg(["verify"]).status == 4)
        let repair = try await device.offlinepkg(["verify", "--repair"])
        #expect(repair.status == 0, "verify --repair as nobody: \(repair.stderr)")
        #expect(try await device.offlinepkg(["verify"]).status == 0)
        #expect(device.mode(tree) == 0o500)
        #expect(try String(contentsOfFile: tree + "/js/app.js", encoding: .utf8) == "app")
    }

    @Test func serveAnswersAGet() async throws {
        let device = try Device()
        try await device.publish("1")
        _ = try await device.sync()
        let command = [OfflinePkgBinary.path, "serve", "--root", device.root, "--port", "0"]
        let process = try ChildProcess(
            getuid() == 0 ? try #require(which("setpriv")) : command[0],
            getuid() == 0 ? ["--reuid=nobody", "--regid=nogroup", "--clear-groups"] + command : Array(command.dropFirst()))
        defer { process.kill() }
        let url = (process.firstLine(timeout: 5) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(url.hasPrefix("http://127.0.0.1:"), "serve as nobody printed no URL")
        let reply = try run("curl", ["-sS", "-H", "Host: m.example.com", url + "js/app.js"], timeout: 10)
        #expect(reply.status == 0 && reply.stdout == "app", "\(reply.stderr)")
        // Unprivileged, the kernel still takes an unpaced congestion control (reno is always allowed):
        // a connection held open while ss lists the server's end of it.
        let port = try #require(URLComponents(string: url)?.port)
        let listing = try shell("""
            exec 3<>/dev/tcp/127.0.0.1/\(port)
            printf 'GET /js/app.js HTTP/1.1\\r\\nHost: m.example.com\\r\\n\\r\\n' >&3
            head -c 12 <&3 >/dev/null
            \(SocketStatistics.command(connectionsFrom: port).map { "'\($0)'" }.joined(separator: " "))
            """, timeout: 10)
        let used = SocketStatistics.congestionControls(inListing: listing)
        #expect(used == ["cubic"] || used == ["reno"], "serve as nobody: ss showed \(listing)")
    }
}
