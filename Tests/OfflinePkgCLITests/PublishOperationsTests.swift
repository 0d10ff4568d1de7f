import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Fleet operations on the publisher's side (docs/publishing.md), through the real binary: history, promote, interrupted publishes,
/// assets-only packages, expiry, progress; and the install and timer files a fleet deploys.
@Suite("Publish operations")
struct PublishOperationsTests {
    static let checkout = Fixtures.root.deletingLastPathComponent().path

    /// Every file of `repo` that a CDN sync would upload as published, with its sha256: all but the
    /// lock and the scratch folder.
    static func publishedNames(_ repo: String) throws -> [String: String] {
        var names = [String: String]()
        guard let walker = FileManager.default.enumerator(atPath: repo) else { return names }
        while let name = walker.nextObject() as? String {
            if name == ".tmp" || name.hasPrefix(".tmp/") || name == ".publish.lock" { continue }
            var isDirectory: ObjCBool = false
            FileManager.default.fileExists(atPath: repo + "/" + name, isDirectory: &isDirectory)
            names[name] = isDirectory.boolValue ? "dir" : try sha256(ofFile: repo + "/" + name)
        }
        return names
    }

    @Test func historyListsVersionsWithDatesAndNotes() async throws {
        let device = try await FleetDevice()
        try await device.publish("1", ["--notes", "first"])
        try await device.publish("2", ["--notes", "second", "--mandatory", "--rollout", "50"])
        let json = try jsonObject(try await InProcessCLI.run(["history", "--repo", device.repo, "--json"]).checked().stdout)
        let package = try #require((json["packages"] as? [[String: Any]])?.first)
        #expect(package["id"] as? String == "home" && package["current"] as? String == "2")
        let releases = try #require(package["releases"] as? [[String: Any]])
        #expect(releases.map { $0["version"] as? String } == ["1", "2"])
        #expect(releases.map { $0["notes"] as? String } == ["first", "second"])
        #expect(releases.map { $0["sequence"] as? Int } == [1, 2])
        #expect(releases[1]["mandatory"] as? Bool == true && releases[1]["rollout"] as? Int == 50)
        #expect(releases.allSatisfy { ($0["publishedAt"] as? String).flatMap(RFC3339Check.parse) != nil })
        let text = try await InProcessCLI.run(["history", "--repo", device.repo]).checked().stdout
        #expect(text.contains("home (manifest offers 2)") && text.contains("    second") && text.contains("mandatory"))
        let missing = await InProcessCLI.run(["history", "--repo", device.scratch.path("nope")])
        #expect(missing.status == 1)
    }

    @Test func promoteCopiesAVersionThatStockMinisignVerifiesAndADeviceSyncs() async throws {
        let device = try await FleetDevice()
        let staging = device.scratch.path("staging")
        let production = device.repo
        try await device.publish("1", repo: staging)
        try await device.publish("1", repo: production)
        try await device.publish("2", repo: staging, padding: 20_000, ["--notes", "from staging"])
        try await device.publish("3", repo: staging)  // staging moved on; 2 is still promotable
        try await device.sync(production + "/manifest.json").checked("production 1")

        let promoted = try await InProcessCLI.run([
            "promote", "--from", staging, "--to", production, "--id", "home", "--version", "2", "--sign-key",
            device.key + ".key", "--json",
        ]).checked("promote")
        #expect(try jsonObject(promoted.stdout)["sequence"] as? Int == 2)
        try run("minisign", ["-Vm", production + "/manifest.json", "-p", device.key + ".pub"]).checked("minisign -V")
        let manifest = try jsonObject(try String(contentsOfFile: production + "/manifest.json", encoding: .utf8))
        let entry = try #require((manifest["packages"] as? [[String: Any]])?.first)
        #expect(entry["version"] as? String == "2" && entry["notes"] as? String == "from staging")
        #expect(FileManager.default.fileExists(atPath: production + "/trees/home/2.index"))
        #expect(try String(contentsOfFile: production + "/trees/home/versions", encoding: .utf8) == "1\n2\n")
        for delta in entry["deltas"] as? [[String: Any]] ?? [] {
            #expect(FileManager.default.fileExists(atPath: production + "/" + (delta["url"] as! String)))
        }

        let synced = try await device.sync(production + "/manifest.json", ["--json"])
        #expect(synced.status == 0, "\(synced.stderr)")
        await #expect(try device.served() == "home 2")
        let history = try await InProcessCLI.run(["history", "--repo", production]).checked().stdout
        #expect(history.contains("promoted from \(staging)"))
        let unknown = await InProcessCLI.run([
            "promote", "--from", staging, "--to", production, "--id", "home", "--version", "9",
        ])
        #expect(unknown.status == 1 && unknown.stderr.contains("was never published"))
    }

    @Test func aPublishKilledWithSIGKILLOrSIGINTLeavesNoPublishedNameBehind() async throws {
        let device = try await FleetDevice()
        try await device.publish("1")
        let before = try Self.publishedNames(device.repo)
        let site = device.scratch.path("sites/big")
        try writeSite(
            [SiteFile("index.html", "big"), SiteFile("noise.bin", bytes: try CrashSafetyTests.randomBytes(10 << 20))], to: site)
        let arguments = [
            "publish", site, "--repo", device.repo, "--id", "home", "--version", "2", "--route", "https://m.example.com/",
            "--sign-key", device.key + ".key", "--quiet",
        ]

        // kill -9 with every archive written and none renamed yet.
        let killed = try OfflinePkgBinary.run(
            arguments, environment: ["OFFLINEPKG_FAILPOINT": "publish-before-rename", "PATH": "/usr/bin:/bin"])
        #expect(killed.status == 128 + SIGKILL)
        #expect(try Self.publishedNames(device.repo) == before)
        let leftover = try FileManager.default.contentsOfDirectory(atPath: device.repo + "/.tmp")
        #expect(!leftover.isEmpty)

        // SIGINT while the archive is being packed: the publish stops itself at its first file (a fail point
        // in stop mode), takes the SIGINT, and is let go on; SIGINT's default action then ends it there.
        let process = try ChildProcess(
            OfflinePkgBinary.path, arguments, environment: ["OFFLINEPKG_FAILPOINT": "publish-packing:stop", "PATH": "/usr/bin:/bin"])
        func stopped() -> Bool {
            let stat = (try? String(contentsOfFile: "/proc/\(process.pid)/stat", encoding: .utf8)) ?? ""
            return stat.split(separator: ")").last?.split(separator: " ").first == "T"
        }
        let deadline = Date().addingTimeInterval(20)
        while !stopped() && process.isRunning && Date() < deadline { usleep(2_000) }
        #expect(stopped(), "the publish never reached its first file: \(process.stderr)")
        // Straight to the pid: a stopped child is no running one to Foundation's `Process`.
        kill(process.pid, SIGINT)
        kill(process.pid, SIGCONT)
        #expect(process.wait().status == 128 + SIGINT && process.endedBySignal)
        #expect(try Self.publishedNames(device.repo) == before)

        // The next publish clears the scratch folder and publishes.
        try await InProcessCLI.run(arguments).checked("publish after the kills")
        let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: device.repo + "/.tmp")) ?? []
        #expect(leftovers.isEmpty, "\(leftovers)")
        try await device.sync(device.repo + "/manifest.json").checked("sync")
        await #expect(try device.served() == "big")
    }

    @Test func anAssetsOnlyPackageIsPublishedWithAWarning() async throws {
        let device = try await FleetDevice()
        let site = device.scratch.path("sites/mathjax")
        try writeSite([SiteFile("es5/tex-chtml.js", "window.MathJax = {}")], to: site)
        let published = await InProcessCLI.run([
            "publish", site, "--repo", device.repo, "--id", "mathjax", "--version", "3.2.2", "--route",
            "https://cdn.example.com/mathjax/", "--sign-key", device.key + ".key",
        ])
        #expect(published.status == 0, "\(published.stderr)")
        #expect(published.stderr.contains("warning: entry file index.html is not in the site"), "\(published.stderr)")
        try await device.sync(device.repo + "/manifest.json").checked("sync")
        let lookup = try await InProcessCLI.run([
            "lookup", "https://cdn.example.com/mathjax/es5/tex-chtml.js", "--root", device.root,
        ]).checked("lookup")
        #expect(try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8) == "window.MathJax = {}")
        // An entry the publisher names must be there.
        let named = await InProcessCLI.run([
            "publish", site, "--repo", device.repo, "--id", "mathjax", "--version", "3.2.3", "--route",
            "https://cdn.example.com/mathjax/", "--entry", "index.html",
        ])
        #expect(named.status == 4)
    }

    @Test func expiresAppliesToItsPublishOnlyAndExpiresInToEveryPublish() async throws {
        let device = try await FleetDevice()
        func expires() async throws -> Date? {
            let manifest = try jsonObject(try String(contentsOfFile: device.repo + "/manifest.json", encoding: .utf8))
            return (manifest["expires"] as? String).flatMap(RFC3339Check.parse)
        }
        try await device.publish("1", ["--expires", "1d"])
        await #expect(try expires() != nil)
        try await device.publish("2")
        await #expect(try expires() == nil, "an --expires given once stuck to a later publish")
        try await device.publish("3", ["--expires-in", "2d"])
        let third = try await #require(try expires())
        #expect(abs(third.timeIntervalSinceNow - 2 * 86_400) < 120)
        sleep(1)
        try await device.publish("4")
        let fourth = try await #require(try expires(), "--expires-in is applied at every publish")
        #expect(fourth > third)
        try await device.publish("5", ["--expires-in", "off"])
        await #expect(try expires() == nil)
    }

    @Test func publishShowsProgressOnATerminal() async throws {
        let device = try await FleetDevice()
        let site = device.scratch.path("sites/p")
        try writeSite(
            [SiteFile("index.html", "p"), SiteFile("noise.bin", bytes: try CrashSafetyTests.randomBytes(4 << 20))], to: site)
        let command = [
            OfflinePkgBinary.path, "publish", site, "--repo", device.repo, "--id", "home", "--version", "1", "--route",
            "https://m.example.com/",
        ].map { "'\($0)'" }.joined(separator: " ")
        // script(1) gives the command a pseudo-terminal for stdin, stdout and stderr.
        let terminal = try run("script", ["-qec", command + " >/dev/null", "/dev/null"]).checked("script")
        #expect(terminal.stdout.contains("packing 2 file(s)"), "\(terminal.stdout)")
        #expect(terminal.stdout.contains("] packed 4.0 MiB / 4.0 MiB"), "\(terminal.stdout)")
        #expect(terminal.stdout.contains("writing the manifest (sequence 1)"))
    }

    @Test func makeInstallPutsTheBinaryAndTheManPageUnderPrefix() async throws {
        let scratch = try TemporaryDirectory()
        let prefix = scratch.path("usr")
        try run("make", ["-C", Self.checkout, "--no-print-directory", "install", "PREFIX=" + prefix, "BIN=" + OfflinePkgBinary.path])
            .checked("make install")
        let version = try run(prefix + "/bin/offlinepkg", ["--version"]).checked("installed offlinepkg")
        #expect(version.stdout.hasPrefix("offlinepkg "))
        // Installed stripped: no symbol table, no debug information.
        let sections = try run("readelf", ["-S", "-W", prefix + "/bin/offlinepkg"]).checked("readelf").stdout
        #expect(!sections.contains(".symtab") && !sections.contains(".debug_info"), "the installed binary is not stripped")
        let man = try run("man", ["-l", prefix + "/share/man/man1/offlinepkg.1"], environment: ["MANPAGER": "cat", "PATH": "/usr/bin:/bin"])
            .checked("man -l")
        #expect(man.stdout.contains("OFFLINEPKG") && man.stdout.contains("promote"))
    }

    /// The service and timer of docs/cron.md, as written, pass `systemd-analyze verify` (with the
    /// binary path pointed at the one under test, since verify checks that ExecStart= exists).
    @Test func theSystemdUnitsInTheDocsVerify() async throws {
        guard let analyze = which("systemd-analyze") else {
            Issue.record("systemd-analyze is not installed (apt-get install systemd): the units of docs/cron.md are unchecked")
            return
        }
        let doc = try String(contentsOfFile: Self.checkout + "/docs/cron.md", encoding: .utf8)
        let blocks = try QuickStartTests.blocks("ini", in: "docs/cron.md").map { $0 + "\n" }
        #expect(blocks.count == 2)
        let service = try #require(blocks.first { $0.contains("[Service]") })
        let timer = try #require(blocks.first { $0.contains("[Timer]") })
        #expect(timer.contains("OnCalendar=") && service.contains("OFFLINEPKG_SHELL_VERSION"))
        // The sync runs as a user of its own, and systemd makes the root it owns: the root the unit
        // names is the state directory it asks for.
        #expect(service.contains("\nUser=offlinepkg\n") && service.contains("\nStateDirectory=offlinepkg\n"), "\(service)")
        #expect(service.contains("--root /var/lib/offlinepkg "), "\(service)")
        let scratch = try TemporaryDirectory()
        try scratch.write(service.replacingOccurrences(of: "/usr/local/bin/offlinepkg", with: OfflinePkgBinary.path), to: "offlinepkg-sync.service")
        try scratch.write(timer, to: "offlinepkg-sync.timer")
        let verified = try run(analyze, ["verify", scratch.path("offlinepkg-sync.service"), scratch.path("offlinepkg-sync.timer")])
        #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")
        #expect(!verified.stderr.contains("offlinepkg-sync"), "\(verified.stderr)")
        // The crontab line names the binary by an absolute path (cron's PATH is /usr/bin:/bin).
        let cronLine = try #require(doc.split(separator: "\n").first { $0.hasPrefix("*/15") })
        #expect(cronLine.contains(" /usr/local/bin/offlinepkg sync "))
        // A system crontab line (/etc/cron.d) names the user that owns the root.
        #expect(cronLine.contains("  offlinepkg  /usr/local/bin/offlinepkg sync ") && cronLine.contains("--root /var/lib/offlinepkg "))
    }
}

/// RFC 3339 times as the CLI prints them.
enum RFC3339Check {
    static func parse(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}
