import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Fleet operations (docs/protocol.md#sequence-expiry-and-channels, #checking-the-manifest, docs/cron.md) through the real binary: channels, stale CDN edges, monitoring, signals, missing roots,
/// dry runs, the shell version from the environment.
@Suite("Fleet operations")
struct FleetOperationsTests {
    @Test func aChannelSwitchIsNotARollbackAndReturningComparesWithThatChannel() async throws {
        let device = try await FleetDevice()
        let staging = device.scratch.path("staging")
        let production = device.scratch.path("production")
        for version in ["s1", "s2"] { try await device.publish(version, repo: staging) }
        let oldManifest = try Data(contentsOf: URL(fileURLWithPath: staging + "/manifest.json"))
        let oldSignature = try Data(contentsOf: URL(fileURLWithPath: staging + "/manifest.json.minisig"))
        try await device.publish("s3", repo: staging)
        for version in ["p1", "p2"] { try await device.publish(version, repo: production) }

        try await device.sync(staging + "/manifest.json").checked("staging, sequence 3")
        await #expect(try device.served() == "home s3")
        // Production is at sequence 2: a channel of its own, not a rollback.
        try await device.sync(production + "/manifest.json").checked("production, sequence 2")
        await #expect(try device.served() == "home p2")
        try await device.sync(staging + "/manifest.json").checked("back to staging")
        await #expect(try device.served() == "home s3")
        let channels = try await #require(try device.status()["acceptedSequence"] as? Int)
        #expect(channels == 3)

        // Staging still remembers its own sequence: an older staging manifest is a rollback.
        try oldManifest.write(to: URL(fileURLWithPath: staging + "/manifest.json"))
        try oldSignature.write(to: URL(fileURLWithPath: staging + "/manifest.json.minisig"))
        let refused = try await device.sync(staging + "/manifest.json")
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("sequence 2 is lower than the accepted 3"), "\(refused.stderr)")
        await #expect(try device.served() == "home s3")
    }

    /// An nginx caching edge in front of an nginx origin serving `device.repo`. Two cache zones stand
    /// for two edge nodes behind one URL: while the file `edge-b` exists, requests go through zone b.
    /// A request with `Cache-Control` goes to the origin (and refreshes the zone), as docs/protocol.md#checking-the-manifest asks of an edge.
    struct Edge {
        let origin: NginxServer
        let edge: NginxServer
        let flag: String

        init(_ device: FleetDevice) throws {
            origin = try NginxServer(
                documentRoot: device.repo, locations: "location / { }")
            flag = device.scratch.path("edge-b")
            edge = try NginxServer(
                documentRoot: device.scratch.path("."),
                locations: """
                    location / {
                        set $zone a;
                        if (-f "\(flag)") { set $zone b; }
                        proxy_cache $zone;
                        proxy_cache_valid 200 1h;
                        proxy_cache_bypass $http_cache_control;
                        proxy_pass http://127.0.0.1:\(origin.port);
                    }
                    """,
                http: """
                    proxy_cache_path "PREFIX/cache-a" keys_zone=a:1m;
                    proxy_cache_path "PREFIX/cache-b" keys_zone=b:1m;
                    """)
        }

        var manifest: String { edge.url("manifest.json").absoluteString }

        /// Has the edge (zone b when `nodeB`) fetch and keep `path` as the origin has it now.
        func prime(_ path: String, nodeB: Bool = false) throws {
            if nodeB { FileManager.default.createFile(atPath: flag, contents: Data()) }
            defer { if nodeB { try? FileManager.default.removeItem(atPath: flag) } }
            try run("curl", ["-sf", "-o", "/dev/null", edge.url(path).absoluteString]).checked("curl \(path)")
        }
    }

    @Test func aStaleSignatureAtTheEdgeIsReplacedByItsImmutableCopyInTheSameSync() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let edge = try Edge(device)
        // The edge keeps version 1's signature; version 2's manifest reaches it fresh.
        try edge.prime("manifest.json.minisig")
        try await device.publish("2")
        let synced = try await device.sync(edge.manifest)
        #expect(synced.status == 0, "\(synced.stderr)")
        await #expect(try device.served() == "home 2")
        let digest = try sha256(ofFile: device.repo + "/manifest.json")
        #expect(edge.origin.waitForRequests(1).contains { $0.uri == "/signatures/\(digest).minisig" })
    }

    @Test func aStaleManifestAtAnotherEdgeNodeIsFetchedAgainUncachedInTheSameSync() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let edge = try Edge(device)
        // Node b keeps version 1; node a sees version 2 and the device takes it (sequence 2).
        try edge.prime("manifest.json", nodeB: true)
        try edge.prime("manifest.json.minisig", nodeB: true)
        try await device.publish("2")
        try await device.sync(edge.manifest).checked("sync through node a")
        try await device.publish("3")
        // Now the device reaches node b, which answers sequence 1: lower than accepted, so once more
        // with no-cache, which reaches the origin and sequence 3.
        FileManager.default.createFile(atPath: edge.flag, contents: Data())
        let synced = try await device.sync(edge.manifest, ["--json"])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(try jsonObject(synced.stdout)["outcome"] as? String == "activated", "\(synced.stdout)")
        await #expect(try device.served() == "home 3")
    }

    @Test func statusRecordsAFiveHundredARefusalAndASuccess() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let flag = device.scratch.path("fail")
        let nginx = try NginxServer(
            documentRoot: device.repo,
            locations: """
                location = /manifest.json { if (-f "\(flag)") { add_header Retry-After 0 always; return 500; } }
                location / { }
                """)
        let url = nginx.url("manifest.json").absoluteString
        try await device.sync(url).checked("first sync")
        let active = device.activeRecord()
        let first = try await device.status()
        #expect(first["consecutiveFailures"] as? Int == 0)
        #expect(first["lastSuccess"] as? String != nil)
        #expect(first["lastError"] == nil)

        FileManager.default.createFile(atPath: flag, contents: Data())
        await #expect(try device.sync(url).status == 1)
        let afterError = try await device.status()
        #expect(afterError["consecutiveFailures"] as? Int == 1)
        let error = try #require(afterError["lastError"] as? [String: Any])
        #expect(error["exitStatus"] as? Int == 1)
        #expect((error["message"] as? String)?.contains("500") == true, "\(error)")
        #expect(afterError["lastAttempt"] as? String == error["time"] as? String)
        #expect(afterError["lastSuccess"] as? String == first["lastSuccess"] as? String)
        #expect(device.activeRecord() == active)

        // A manifest signed by another key: refused, exit 4, noted the same way.
        try FileManager.default.removeItem(atPath: flag)
        let other = device.scratch.path("other")
        try await InProcessCLI.run(["keygen", other]).checked("keygen")
        let refused = await InProcessCLI.run(["sync", url, "--root", device.root, "--trust-key", other + ".pub", "--quiet"])
        #expect(refused.status == 4)
        let afterRefusal = try await device.status()
        #expect(afterRefusal["consecutiveFailures"] as? Int == 2)
        #expect((afterRefusal["lastError"] as? [String: Any])?["exitStatus"] as? Int == 4)
        #expect(device.activeRecord() == active)

        try await device.publish("2")
        try await device.sync(url).checked("sync after the failures")
        let recovered = try await device.status()
        #expect(recovered["consecutiveFailures"] as? Int == 0)
        #expect(recovered["lastSuccess"] as? String != nil)
        #expect((recovered["lastError"] as? [String: Any])?["exitStatus"] as? Int == 4, "the last error stays visible")
        await #expect(try device.served() == "home 2")
    }

    @Test func underSystemdEveryStderrLineCarriesItsPriority() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        // JOURNAL_STREAM names fd 2 (device:inode), as systemd sets it for a unit's output.
        let script = """
            export JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2)
            "$0" sync "$1" --root "$2"
            "$0" keygen "$3" > /dev/null
            "$0" status --root "$2/missing"
            exit 0
            """
        let journal = try run(
            "sh", ["-c", script, OfflinePkgBinary.path, device.repo + "/manifest.json", device.root, device.scratch.path("k2")]
        ).checked("sh")
        let lines = journal.stderr.split(separator: "\n")
        #expect(!lines.isEmpty)
        for line in lines { #expect(line.hasPrefix("<3>") || line.hasPrefix("<4>") || line.hasPrefix("<6>"), "\(line)") }
        #expect(lines.contains { $0.hasPrefix("<6>") && $0.contains("checking ") })
        #expect(lines.contains { $0.hasPrefix("<4>") && $0.contains("keep ") })
        #expect(lines.contains { $0.hasPrefix("<3>") && $0.contains("no cache root at") })
        // A JOURNAL_STREAM that names another file (a child whose stderr was redirected): no prefixes.
        let plain = await InProcessCLI.run(
            ["sync", device.repo + "/manifest.json", "--root", device.root], environment: ["JOURNAL_STREAM": "8:12345"])
        #expect(plain.status == 0)
        #expect(!plain.stderr.isEmpty && !plain.stderr.contains("<6>"))
    }

    @Test(arguments: [(SIGINT, 130), (SIGTERM, 143)] as [(Int32, Int32)])
    func aSignalMidDownloadExitsWithOneLineAndTheNextSyncResumes(signal number: Int32, status: Int32) async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let nginx = try NginxServer(documentRoot: device.repo, limitRate: 200_000, locations: "location / { }")
        let url = nginx.url("manifest.json").absoluteString
        try await device.sync(url).checked("first sync")
        let active = try #require(device.activeRecord())
        try await device.publish("2", padding: 1_500_000)

        let process = try ChildProcess(
            OfflinePkgBinary.path, ["sync", url, "--root", device.root, "--trust-key", device.key + ".pub", "--quiet"])
        // Until part of the archive is on disk.
        let deadline = Date().addingTimeInterval(20)
        func partial() -> Int {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: device.root + "/downloads")) ?? []
            return names.filter { $0.hasSuffix(".part") }.compactMap {
                (try? FileManager.default.attributesOfItem(atPath: device.root + "/downloads/" + $0)[.size] as? Int) ?? nil
            }.max() ?? 0
        }
        while partial() < 300_000 && Date() < deadline { usleep(20_000) }
        #expect(partial() >= 300_000, "the download never got going")
        process.signal(number)
        let ended = process.wait()
        let stderr = ended.stderr
        #expect(!process.endedBySignal && ended.status == status, "\(stderr)")
        let lines = stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("interrupted by SIG"), "\(stderr)")
        #expect(device.activeRecord() == active, "the active set changed")
        await #expect(try device.served() == "home 1")
        let afterSignal = try await device.status()
        let noted = try #require(afterSignal["lastError"] as? [String: Any])
        #expect(noted["exitStatus"] as? Int == Int(status))
        // An interruption needs no action (docs/cron.md): noted, not counted as a failure.
        #expect(afterSignal["consecutiveFailures"] as? Int == 0, "\(afterSignal)")

        try await device.sync(url).checked("the next sync")
        await #expect(try device.served() == "home 2")
        let archive = nginx.accessLog().filter { $0.uri.hasSuffix(".tar.zst") && $0.uri.contains("/2/") }
        #expect(archive.last?.status == 206, "not resumed: \(archive.map { ($0.status, $0.range ?? "-") })")
    }

    @Test(arguments: [
        ["status"], ["status", "--json"], ["lookup", "https://m.example.com/"], ["verify"], ["gc"], ["rollback"], ["serve"],
    ])
    func everyCommandButSyncRefusesAMissingRootAndCreatesNothing(_ command: [String]) async throws {
        let scratch = try TemporaryDirectory()
        let root = scratch.path("typo/root")
        let result = await InProcessCLI.run(command + ["--root", root])
        #expect(result.status == 1)
        #expect(result.stderr.contains("no cache root at \(root)"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path("typo")))
    }

    @Test func aDryRunPrintsThePlanAndFetchesNoArchive() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let nginx = try NginxServer(documentRoot: device.repo, locations: "location / { }")
        let url = nginx.url("manifest.json").absoluteString
        try await device.sync(url).checked("first sync")
        try await device.publish("2", ["--notes", "faster start", "--mandatory"])
        let before = try FileManager.default.contentsOfDirectory(atPath: device.root).sorted()
        let state = FileManager.default.contents(atPath: device.root + "/state.json")
        let requestsBefore = nginx.waitForRequests(3).count

        let plan = try await device.sync(url, ["--dry-run", "--json"])
        #expect(plan.status == 0, "\(plan.stderr)")
        let object = try jsonObject(plan.stdout)
        #expect(object["wouldActivate"] as? Bool == true)
        #expect(object["mandatory"] as? Bool == true)
        let step = try #require((object["steps"] as? [[String: Any]])?.first)
        #expect(step["from"] as? String == "1" && step["to"] as? String == "2")
        #expect(step["notes"] as? String == "faster start")
        #expect((step["bytes"] as? Int ?? 0) > 0)
        let plain = await InProcessCLI.run(
            ["sync", url, "--root", device.root, "--trust-key", device.key + ".pub", "--dry-run"])
        #expect(plain.stdout.contains("would activate sequence 2"), "\(plain.stdout)")
        #expect(plain.stdout.contains("home 1 -> 2 via"), "\(plain.stdout)")

        let log = nginx.waitForRequests(requestsBefore + 3)
        #expect(!log.dropFirst(requestsBefore).contains { $0.uri.hasPrefix("/archives/") }, "a dry run fetched an archive")
        #expect(try FileManager.default.contentsOfDirectory(atPath: device.root).sorted() == before)
        #expect(FileManager.default.contents(atPath: device.root + "/state.json") == state)
        await #expect(try device.served() == "home 1")
        // A dry run on a root that does not exist yet creates none.
        let fresh = device.scratch.path("fresh")
        let freshPlan = await InProcessCLI.run(["sync", url, "--root", fresh, "--dry-run", "--json"])
        #expect(freshPlan.status == 0)
        #expect(!FileManager.default.fileExists(atPath: fresh))
    }

    @Test func theShellVersionComesFromTheEnvironmentWhenNoOptionGivesIt() async throws {
        let device = try await FleetDevice()
        try await device.publish("1", ["--min-shell-version", "9.0"])
        let environment = ["OFFLINEPKG_SHELL_VERSION": "3.2", "PATH": "/usr/bin:/bin"]
        let held = try await device.sync(device.repo + "/manifest.json", ["--json"], environment: environment)
        #expect(held.status == 0, "\(held.stderr)")
        let report = try jsonObject(held.stdout)
        #expect((report["heldBack"] as? [[String: Any]])?.first?["reason"] as? String == "needs shell 9.0, this shell is 3.2")
        await #expect(try device.served() == nil)
        // The option wins over the variable.
        try await device.sync(device.repo + "/manifest.json", ["--shell-version", "9.1"], environment: environment).checked()
        await #expect(try device.served() == "home 1")
        let bad = try await device.sync(device.repo + "/manifest.json", [], environment: ["OFFLINEPKG_SHELL_VERSION": "nine"])
        #expect(bad.status == 2 && bad.stderr.contains("OFFLINEPKG_SHELL_VERSION"))
    }

    @Test func notesAndMandatoryReachTheSyncReportAndStatus() async throws {
        let device = try await FleetDevice()
        try await device.publish("1", ["--notes", "first release"])
        let first = try await jsonObject(try device.sync(device.repo + "/manifest.json", ["--json"]).checked().stdout)
        #expect(first["mandatory"] as? Bool == false)
        #expect((first["changes"] as? [[String: Any]])?.first?["notes"] as? String == "first release")
        try await device.publish("2", ["--notes", "security fix", "--mandatory"])
        let second = try await jsonObject(try device.sync(device.repo + "/manifest.json", ["--json"]).checked().stdout)
        #expect(second["mandatory"] as? Bool == true)
        let change = try #require((second["changes"] as? [[String: Any]])?.first)
        #expect(change["notes"] as? String == "security fix" && change["mandatory"] as? Bool == true)
        let status = try await device.status()
        let package = try #require(((status["active"] as? [String: Any])?["packages"] as? [[String: Any]])?.first)
        #expect(package["notes"] as? String == "security fix" && package["mandatory"] as? Bool == true)
        let text = try await InProcessCLI.run(["status", "--root", device.root]).checked().stdout
        #expect(text.contains("home 2 (mandatory)") && text.contains("notes: security fix"))
    }
}
