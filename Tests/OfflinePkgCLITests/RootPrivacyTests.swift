import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#neighbours-on-the-device, files: what the shell's user keeps in its root is its own. The root is made and used by
/// `nobody`, and a second user (`opk-b`) tries to read it.
@Suite(.enabled(if: LocalUser.available, "needs root to act as two users"))
struct RootPrivacyTests {
    /// A published site (with a runtime rule for an nginx upstream) and a folder `nobody` may create a
    /// root in.
    struct Device {
        let scratch: TemporaryDirectory
        let upstream: NginxServer
        var root: String { scratch.path("home/root") }
        var apiHost: String { "api.privacy.test:\(upstream.port)" }

        init() throws {
            scratch = try TemporaryDirectory(prefix: "offlinepkg-privacy")
            chmod(scratch.path, 0o755)
            try scratch.write("{\"secret\": \"alice's\"}\n", to: "upstream/v1/me.json")
            upstream = try NginxServer(documentRoot: scratch.path("upstream"), locations: "location / { }")
            try scratch.makeDirectory("home")
            try LocalUser.shell.own(scratch.path("home"))
            try publish("1")
        }

        func publish(_ version: String) throws {
            try scratch.write("home \(version)", to: "site/index.html")
            let rules = try scratch.write(
                "{\"rules\": [{\"prefix\": \"http://\(apiHost)/v1/\", \"strategy\": \"cache-first\"}]}", to: "rules.json")
            try OfflinePkgBinary.run([
                "publish", scratch.path("site"), "--repo", scratch.path("repo"), "--id", "home", "--version", version,
                "--route", "https://m.example.com/", "--runtime", rules, "--quiet",
            ]).checked("publish \(version)")
        }

        func sync() throws {
            try LocalUser.shell.run([
                OfflinePkgBinary.path, "sync", scratch.path("repo/manifest.json"), "--root", root, "--quiet",
            ])
            .checked("sync as nobody")
        }

        /// Every path below the root (the root included) whose mode gives its group or others anything.
        func openToOthers() -> [String] {
            var open = [String]()
            func walk(_ path: String) {
                var info = stat()
                guard lstat(path, &info) == 0 else { return }
                let type = info.st_mode & S_IFMT
                if type != S_IFLNK && info.st_mode & 0o077 != 0 {
                    open.append("\(String(info.st_mode & 0o777, radix: 8)) \(path)")
                }
                if type == S_IFDIR {
                    for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] { walk(path + "/" + name) }
                }
            }
            walk(root)
            return open
        }
    }

    @Test func everyFileUnderAFreshRootIsUnreadableByAnotherUser() throws {
        let device = try Device()
        try device.sync()
        // serve --tls makes the key and certificate, and one answer is stored in the runtime cache.
        let serve = try LocalUser.shell.start([
            OfflinePkgBinary.path, "serve", "--root", device.root, "--port", "0", "--tls", "--resolve",
            "\(device.apiHost):127.0.0.1",
        ])
        let url = try #require(serve.firstLine(timeout: 10), "serve --tls as nobody: \(serve.stderr)")
        let stored = try run("curl", ["-sSk", "-H", "Host: \(device.apiHost)", url + "v1/me.json"])
        #expect(stored.stdout.contains("alice's"), "\(stored.stderr)")
        serve.signal(SIGTERM)
        serve.wait(timeout: 10)
        #expect(FileManager.default.fileExists(atPath: device.root + "/tls/key.pem"))
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: device.root + "/runtime/entries")) ?? []).count == 1)

        let open = device.openToOthers()
        #expect(open.isEmpty, "readable by others: \(open.prefix(20).joined(separator: "\n"))")
        for target in ["", "/state.json", "/manifest.json", "/tls/key.pem", "/runtime/entries", "/trees"] {
            let read = try LocalUser.hostile.run([
                "/bin/sh", "-c", "ls -la '\(device.root + target)' && cat '\(device.root + target)'",
            ])
            #expect(read.status != 0 && read.stdout.isEmpty, "opk-b read \(target): \(read.stdout.prefix(300))")
        }
    }

    /// What a publisher writes is for a web server, often running as another user: private defaults on
    /// the device side must not leak into the repository.
    @Test func aPublishedRepositoryStaysReadableByEveryUser() throws {
        let device = try Device()
        try device.publish("2")
        let read = try LocalUser.hostile.run([
            "/bin/sh", "-c", "find '\(device.scratch.path("repo"))' -type f -exec cat {} + > /dev/null",
        ])
        #expect(read.status == 0, "opk-b cannot read the repository: \(read.stderr)")
        // The device syncs it as another user, from the file system.
        try device.sync()
    }

    @Test func anOldOpenRootIsTightenedAtItsNextSync() throws {
        let device = try Device()
        try device.sync()
        // What an older offlinepkg left: 0755 folders, 0644 files, readable by every user.
        _ = try shell("chmod -R go+rX '\(device.root)'")
        #expect(!device.openToOthers().isEmpty)
        // The next sync, even one that finds nothing new, closes it.
        try device.sync()
        let open = device.openToOthers()
        #expect(open.isEmpty, "still open after a sync: \(open.prefix(20).joined(separator: "\n"))")
        try device.publish("2")
        try device.sync()
        #expect(device.openToOthers().isEmpty)
    }

    /// A folder (or a link to one) that another user made at the root's path beforehand, in a folder
    /// both may write: the shell's user must not keep its files in it, nor serve from it.
    @Test func aRootAnotherUserMadeIsRefused() throws {
        let device = try Device()
        let shared = try device.scratch.makeDirectory("shared")
        chmod(shared, 0o1777)
        let planted = try LocalUser.hostile.run([
            "/bin/sh", "-c",
            "mkdir -m 777 '\(shared)/root' '\(shared)/elsewhere' && ln -s '\(shared)/elsewhere' '\(shared)/link'",
        ])
        try #require(planted.status == 0, "\(planted.stderr)")
        for name in ["root", "link"] {
            let sync = try LocalUser.shell.run([
                OfflinePkgBinary.path, "sync", device.scratch.path("repo/manifest.json"), "--root", shared + "/" + name,
                "--quiet",
            ])
            #expect(sync.status != 0 && sync.stderr.contains("owned by uid"), "\(name): \(sync.status) \(sync.stderr)")
            let serve = try LocalUser.shell.run(
                [OfflinePkgBinary.path, "serve", "--root", shared + "/" + name, "--port", "0"], timeout: 10)
            #expect(serve.status != 0 && serve.stdout.isEmpty, "\(name): serve \(serve.stdout)")
        }
        for folder in ["root", "elsewhere"] {
            let left = (try? FileManager.default.contentsOfDirectory(atPath: shared + "/" + folder)) ?? []
            #expect(left.isEmpty, "the shell's user wrote into opk-b's \(folder): \(left)")
        }
    }

    /// Root is no exception: in a folder another user owns, that user can swap a folder for a link while
    /// root writes or tightens there, and steer root's writes and mode changes outside it (a 0777 folder
    /// root once synced into, aimed at /etc). Root's sync and serve refuse it, and nothing in it changes.
    @Test func aRootAnotherUserOwnsIsRefusedToRootToo() throws {
        let device = try Device()
        let planted = try device.scratch.makeDirectory("planted/trees")
        let root = device.scratch.path("planted")
        try device.scratch.write("{}", to: "planted/state.json")
        for (path, mode) in [(root, 0o777), (planted, 0o777), (root + "/state.json", 0o644)] as [(String, mode_t)] {
            chmod(path, mode)
            try LocalUser.hostile.own(path)
        }
        let listing = { try shell("find '\(root)' -printf '%m %u %p\\n' | sort") }
        let before = try listing()

        let sync = try OfflinePkgBinary.run(["sync", device.scratch.path("repo/manifest.json"), "--root", root, "--quiet"])
        #expect(sync.status == 1, "\(sync.status): \(sync.stderr)")
        #expect(
            sync.stderr.contains("cache root \(root) is owned by uid") && sync.stderr.contains("(opk-b)"), "\(sync.stderr)")
        let serve = try OfflinePkgBinary.run(["serve", "--root", root, "--port", "0"], timeout: 10)
        #expect(serve.status == 1 && serve.stdout.isEmpty && serve.stderr.contains("opk-b"), "serve: \(serve.stdout) \(serve.stderr)")
        #expect(try listing() == before)
    }

    @Test func aTLSKeyAnotherUserOwnsOrCanReadIsRefused() throws {
        let device = try Device()
        try device.sync()
        let first = try LocalUser.shell.start([OfflinePkgBinary.path, "serve", "--root", device.root, "--port", "0", "--tls"])
        #expect(first.firstLine(timeout: 10) != nil, "\(first.stderr)")
        first.signal(SIGTERM)
        first.wait(timeout: 10)
        let key = device.root + "/tls/key.pem"

        // Readable by others: a key anyone could have copied is no secret.
        chmod(key, 0o644)
        let readable = try LocalUser.shell.run(
            [OfflinePkgBinary.path, "serve", "--root", device.root, "--port", "0", "--tls"], timeout: 10)
        #expect(readable.status != 0 && readable.stdout.isEmpty, "serve used a 0644 key: \(readable.stdout)")
        #expect(readable.stderr.contains("tls/key.pem") && readable.stderr.contains("0644"), "\(readable.stderr)")

        // Owned by another user (who could swap it at will), even at 0600: root's serve refuses it too,
        // in a root of root's own (it refuses nobody's root whole: `aRootAnotherUserOwnsIsRefusedToRootToo`).
        let rootsRoot = device.scratch.path("roots-root")
        try OfflinePkgBinary.run(["sync", device.scratch.path("repo/manifest.json"), "--root", rootsRoot, "--quiet"])
            .checked("sync as root")
        let second = try ChildProcess(OfflinePkgBinary.path, ["serve", "--root", rootsRoot, "--port", "0", "--tls"])
        #expect(second.firstLine(timeout: 10) != nil, "\(second.stderr)")
        second.signal(SIGTERM)
        second.wait(timeout: 10)
        try LocalUser.hostile.own(rootsRoot + "/tls/key.pem")
        let foreign = try run(OfflinePkgBinary.path, ["serve", "--root", rootsRoot, "--port", "0", "--tls"], timeout: 10)
        #expect(foreign.status != 0 && foreign.stdout.isEmpty, "serve used opk-b's key: \(foreign.stdout)")
        #expect(foreign.stderr.contains("tls/key.pem") && foreign.stderr.contains("opk-b"), "\(foreign.stderr)")
    }

    /// `sync` of an unsigned manifest over cleartext http from another host than loopback is refused
    /// before any byte is fetched. `0.0.0.0` is such a host that still reaches this machine.
    @Test func anUnsignedCleartextSyncIsRefusedUnlessInsecure() async throws {
        let device = try Device()
        let repo = try NginxServer(documentRoot: device.scratch.path, locations: "location / { }")
        let remote = "http://0.0.0.0:\(repo.port)/repo/manifest.json"
        let refused = await InProcessCLI.run(["sync", remote, "--root", device.scratch.path("r1")])
        #expect(refused.status == 2, "\(refused.status): \(refused.stderr)")
        #expect(refused.stderr.contains("--insecure") && refused.stderr.contains("--trust-key"), "\(refused.stderr)")
        #expect(repo.accessLog().isEmpty, "the refused sync fetched \(repo.accessLog().map(\.uri))")

        let insecure = await InProcessCLI.run(["sync", remote, "--root", device.scratch.path("r1"), "--insecure"])
        #expect(insecure.status == 0 && insecure.stderr.contains("warning"), "\(insecure.stderr)")
        // Loopback, a file and --quiet: the warning alone, then nothing.
        let loopback = await InProcessCLI.run([
            "sync", repo.url("repo/manifest.json").absoluteString, "--root", device.scratch.path("r2"),
        ])
        #expect(loopback.status == 0 && loopback.stderr.contains("warning: the manifest is not signed"), "\(loopback.stderr)")
        let quiet = await InProcessCLI.run([
            "sync", device.scratch.path("repo/manifest.json"), "--root", device.scratch.path("r3"), "--quiet",
        ])
        #expect(quiet.status == 0 && quiet.stderr.isEmpty, "\(quiet.stderr)")
    }

    @Test func aStoredManifestURLKeepsNoUserinfo() async throws {
        let device = try Device()
        let repo = try NginxServer(documentRoot: device.scratch.path, locations: "location / { }")
        let url = "http://reader:s3cret@127.0.0.1:\(repo.port)/repo/manifest.json"
        let root = device.scratch.path("r")
        let synced = await InProcessCLI.run(["sync", url, "--root", root, "--json", "--quiet"])
        #expect(synced.status == 0, "\(synced.stderr)")
        let status = try await InProcessCLI.run(["status", "--root", root, "--json"]).checked("status")
        let state = String(decoding: try device.scratch.read("r/state.json"), as: UTF8.self)
        for (what, text) in [("state.json", state), ("status --json", status.stdout), ("sync --json", synced.stdout)] {
            #expect(!text.contains("s3cret") && !text.contains("reader:"), "\(what) keeps the userinfo: \(text)")
        }
        #expect(state.contains("127.0.0.1:\(repo.port)/repo/manifest.json"))
    }

    @Test(arguments: [
        "http://127.0.0.1:8080/v1/", "http://10.1.2.3/", "http://[::1]:80/", "http://169.254.169.254/latest/",
        "http://[fd00::1]/", "http://0x7f.1/", "http://192.168.1.1/", "http://0.0.0.0/", "http://[::ffff:127.0.0.1]/",
        "https://172.16.0.1/", "http://[fe80::1]/",
    ])
    func aRuleForALiteralPrivateAddressIsRefusedWithTheManifest(prefix: String) async throws {
        let scratch = try TemporaryDirectory()
        try scratch.write("<title>x</title>", to: "site/index.html")
        let rules = try scratch.write(
            "{\"rules\": [{\"prefix\": \"\(prefix)\", \"strategy\": \"cache-first\"}]}", to: "rules.json")
        let publish = await InProcessCLI.run([
            "publish", scratch.path("site"), "--repo", scratch.path("repo"), "--id", "a", "--version", "1", "--route",
            "https://m.example.com/", "--runtime", rules, "--quiet",
        ])
        #expect(
            publish.status == 4 && publish.stderr.contains("rules[0].prefix"), "\(prefix): \(publish.status) \(publish.stderr)")

        // A device refuses it too, in a manifest that did not come through publish.
        try await InProcessCLI.run([
            "publish", scratch.path("site"), "--repo", scratch.path("repo"), "--id", "a", "--version", "1", "--route",
            "https://m.example.com/", "--quiet",
        ]).checked("publish")
        let manifest = scratch.path("repo/manifest.json")
        var object = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: manifest))) as? [String: Any])
        object["runtime"] = ["rules": [["prefix": prefix, "strategy": "cache-first"]]]
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: manifest))
        let sync = await InProcessCLI.run(["sync", manifest, "--root", scratch.path("root"), "--quiet"])
        #expect(sync.status == 4 && sync.stderr.contains("runtime.rules[0].prefix"), "\(prefix): \(sync.status) \(sync.stderr)")
    }
}
