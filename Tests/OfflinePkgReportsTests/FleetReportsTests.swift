import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgReports

/// Install reports (docs/protocol.md#install-reports) end to end on loopback: 50 device roots syncing with the `offlinepkg` command line through nginx,
/// which serves the repository and proxies `/reports` to `reports serve`, while the publisher releases
/// three versions: one that fails on the devices its rollout reaches (a damaged archive), one that all
/// take, one that some revert (their launch is never confirmed). The collector is down for one round;
/// two devices are killed in the middle of a send (one after the collector stored it, one before). In
/// the end every event each device made is stored exactly once, and `reports show` gives the fleet's
/// true adoption.
@Suite("Install reports of a fleet", .serialized)
struct FleetReportsTests {
    static let devices = 50
    static let parallel = 8

    final class Fleet: @unchecked Sendable {
        // Driven by one test; the shared tallies are behind their own locks.
        let scratch: TemporaryDirectory
        let nginx: NginxServer
        var collector: CollectorProcess
        let collectorPort: Int
        var repo: String { scratch.path("repo") }
        var key: String { scratch.path("key") }
        var database: String { scratch.path("reports.db") }
        var manifest: String { nginx.url("manifest.json").absoluteString }
        /// What each device did, by device id: event kind → count (the truth the collector must match).
        let did = Shared<[String: [String: Int]]>([:])
        private var publishes = 0

        init() async throws {
            scratch = try TemporaryDirectory(prefix: "offlinepkg-fleet-reports")
            _ = try scratch.makeDirectory("repo")
            try await InProcessCLI.run(["keygen", scratch.path("key")]).checked("keygen")
            collector = try CollectorProcess(database: scratch.path("reports.db"))
            collectorPort = collector.port
            nginx = try NginxServer(
                documentRoot: scratch.path("repo"),
                locations: """
                    location / { }
                    location = /reports { proxy_pass http://127.0.0.1:\(collectorPort); }
                    """)
        }

        func root(_ device: Int) -> String { scratch.path("devices/\(device)") }
        func deviceID(_ device: Int) -> String { DeviceID.existing(CacheLayout(root: root(device))) ?? "?" }

        /// Publishes `id version` (a page and 2 KiB of its own), signed; `extra` options.
        func publish(_ id: String, _ version: String, _ extra: [String] = []) async throws {
            let site = scratch.path("sites/\(id)-\(version)")
            try writeSite(
                [
                    SiteFile("index.html", "\(id) \(version)"),
                    SiteFile("app.js", bytes: Array(repeating: UInt8(version.utf8.first!), count: 2048)),
                ],
                to: site)
            let route = id == "home" ? "https://m.example.com/" : "https://m.example.com/\(id)/"
            try await InProcessCLI.run(
                [
                    "publish", site, "--repo", repo, "--id", id, "--version", version, "--route", route, "--sign-key",
                    key + ".key", "--quiet",
                ]
                    + extra
            ).checked("publish \(id) \(version)")
            // nginx's validators have one-second resolution: each publish gets an mtime of its own.
            publishes += 1
            for name in ["manifest.json", "manifest.json.minisig"] {
                try FileManager.default.setAttributes(
                    [.modificationDate: Date().addingTimeInterval(Double(publishes))], ofItemAtPath: repo + "/" + name)
            }
        }

        /// The arguments of one device's sync.
        func syncArguments(_ device: Int) -> [String] {
            ["sync", manifest, "--root", root(device), "--trust-key", key + ".pub", "--json", "--quiet"]
        }

        /// Notes what a finished sync did, from its exit status and its JSON.
        func note(_ device: Int, _ result: ProcessResult) throws {
            switch result.status {
            case 0:
                let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
                if report["outcome"] as? String == "activated" { count(device, "activated") }
            case 3: break
            default: count(device, "failed")
            }
        }

        func count(_ device: Int, _ kind: String) {
            let id = deviceID(device)
            did.with { $0[id, default: [:]][kind, default: 0] += 1 }
        }

        /// Every device but `except` syncs, `parallel` at a time; returns the exit statuses by device.
        @discardableResult
        func round(except: Set<Int> = []) async throws -> [Int: Int32] {
            let statuses = Shared<[Int: Int32]>([:])
            try await inParallel(FleetReportsTests.devices, width: FleetReportsTests.parallel) { device in
                guard !except.contains(device) else { return }
                let result = await InProcessCLI.run(self.syncArguments(device))
                try self.note(device, result)
                statuses.with { $0[device] = result.status }
            }
            return statuses.current
        }

        /// A host's launch of `device`'s active set, counting launches; returns what it decided.
        func launch(_ device: Int, confirm: Bool) throws -> LaunchDecision {
            let root = try CacheRoot(root: URL(fileURLWithPath: root(device)), launchesBeforeRevert: 1)
            let decision = try root.recordLaunch()
            if case .reverted = decision { count(device, "reverted") }
            if confirm, case .awaitingConfirmation(let generation, _) = decision {
                try root.confirmLaunch(generation: generation)
                count(device, "confirmed")
            }
            return decision
        }

        /// The stored events, by device id: event kind → count.
        func stored() throws -> [String: [String: Int]] {
            var result = [String: [String: Int]]()
            for line in try sqlite(database, "SELECT device, event, count(*) FROM events GROUP BY device, event").split(
                separator: "\n")
            {
                let fields = line.split(separator: "|").map(String.init)
                result[fields[0], default: [:]][fields[1]] = Int(fields[2])
            }
            return result
        }

        /// Overwrites bytes in the middle of `path`, keeping its size: its sha256 no longer matches.
        func damage(_ path: String) throws {
            let handle = try #require(FileHandle(forUpdatingAtPath: path))
            let size = try handle.seekToEnd()
            try handle.seek(toOffset: size / 2)
            try handle.write(contentsOf: Data(repeating: 0x5a, count: 64))
            try handle.close()
        }
    }

    @Test func theCollectorReceivesEveryEventOnceAndShowsTrueAdoption() async throws {
        let fleet = try await Fleet()
        let collectorURL = "http://127.0.0.1:\(fleet.nginx.port)/reports"

        // Release 1 (home 1, docs 1), reports on: every device activates it.
        try await fleet.publish("home", "1", ["--reports", collectorURL])
        try await fleet.publish("docs", "1")
        var statuses = try await fleet.round()
        #expect(statuses.values.allSatisfy { $0 == 0 } && statuses.count == Self.devices)
        for device in 0..<Self.devices {
            #expect(try fleet.launch(device, confirm: true) == .awaitingConfirmation(generation: 1, launch: 1))
        }

        // docs 2, to 40 % of devices, with a damaged archive; the collector is down for this round. The
        // syncs that reach it fail (exit 4), the others succeed: no exit status says reports were lost.
        try await fleet.publish("docs", "2", ["--rollout", "40", "--deltas", "0", "--format", "tar.gz"])
        try fleet.damage(fleet.repo + "/archives/docs/2/docs-2.tar.gz")
        fleet.collector.stop()
        statuses = try await fleet.round()
        let reached = Set(
            (0..<Self.devices).filter { Rollout.bucket(deviceID: fleet.deviceID($0), packageID: "docs", version: "2") < 40 })
        #expect(!reached.isEmpty && reached.count < Self.devices)
        #expect(Set(statuses.filter { $0.value == 4 }.keys) == reached)
        #expect(statuses.filter { $0.value == 0 }.count == Self.devices - reached.count)
        let queued = try await InProcessCLI.run(["status", "--root", fleet.root(reached.first!), "--json"]).checked("status").stdout
        let reports = try #require(
            (try JSONSerialization.jsonObject(with: Data(queued.utf8)) as? [String: Any])?["reports"] as? [String: Any])
        // Release 1's launch confirmation (recorded after that round's send) and this failure wait.
        #expect(reports["events"] as? Int == 2 && reports["url"] as? String == collectorURL, "\(reports)")
        #expect((reports["lastFailure"] as? [String: Any])?["message"] as? String != nil)
        fleet.collector = try CollectorProcess(database: fleet.database, port: fleet.collectorPort)

        // docs 3 mends it, with home 2: everyone activates and confirms the launch.
        try await fleet.publish("docs", "3", ["--rollout", "100"])
        try await fleet.publish("home", "2")
        statuses = try await fleet.round()
        #expect(statuses.values.allSatisfy { $0 == 0 })
        for device in 0..<Self.devices {
            #expect(try fleet.launch(device, confirm: true) == .awaitingConfirmation(generation: 2, launch: 1))
        }

        // home 3: two devices are killed in the middle of their send — one whose events the collector
        // stored without the device hearing it, one whose events never arrived. Ten never confirm the
        // launch, and revert.
        try await fleet.publish("home", "3")
        fleet.collector.stop()
        let standIn = try CollectorProcess(database: fleet.database)
        let (storedThenKilled, killedBeforeStored) = (0, 1)
        let proxy = try HoldingProxy(
            port: fleet.collectorPort, upstream: standIn.port,
            treatments: [fleet.deviceID(storedThenKilled): .forwardThenHold, fleet.deviceID(killedBeforeStored): .hold])
        let killed = try [storedThenKilled, killedBeforeStored].map {
            try ChildProcess(OfflinePkgBinary.path, fleet.syncArguments($0))
        }
        try await fleet.round(except: [storedThenKilled, killedBeforeStored])
        let deadline = Date().addingTimeInterval(30)
        while proxy.held.count < 2 && Date() < deadline { usleep(10_000) }
        #expect(proxy.held.count == 2 && proxy.forwarded == [fleet.deviceID(storedThenKilled)])
        for process in killed { #expect(process.kill().status == 128 + SIGKILL) }
        proxy.stop()
        standIn.stop()
        for device in [storedThenKilled, killedBeforeStored] {
            // Killed after the switch: each activated home 3, and its event waits in its queue.
            #expect(
                try String(contentsOfFile: fleet.root(device) + "/active.json", encoding: .utf8).contains("\"version\" : \"3\""))
            fleet.count(device, "activated")
        }
        fleet.collector = try CollectorProcess(database: fleet.database, port: fleet.collectorPort)
        let reverting = Set(40..<Self.devices)
        for device in 0..<Self.devices {
            let confirm = !reverting.contains(device)
            _ = try fleet.launch(device, confirm: confirm)
            if !confirm { #expect(try fleet.launch(device, confirm: false) == .reverted(from: 3, to: 4)) }
        }

        // A last round sends what waited: the reverts, the confirmations, the killed devices' events.
        statuses = try await fleet.round()
        #expect(statuses.values.allSatisfy { $0 == 0 })
        let stored = try fleet.stored()
        let truth = fleet.did.current
        #expect(stored == truth)
        #expect(truth.values.reduce(0) { $0 + ($1["failed"] ?? 0) } == reached.count)
        #expect(truth.values.reduce(0) { $0 + ($1["reverted"] ?? 0) } == reverting.count)
        #expect(try sqlite(fleet.database, "PRAGMA integrity_check") == "ok")

        // The adoption `reports show` gives is what the roots hold.
        let shown = try await InProcessCLI.run(["reports", "show", "--db", fleet.database, "--json"]).checked("show")
        let summary = try JSONDecoder().decode(FleetSummary.self, from: Data(shown.stdout.utf8))
        var onDisk = [String: [String: Int]]()
        for device in 0..<Self.devices {
            let record = try ActiveRecord.load(CacheLayout(root: fleet.root(device)))
            for package in record.current.packages { onDisk[package.id, default: [:]][package.version, default: 0] += 1 }
        }
        for package in summary.packages {
            let devices = Dictionary(
                uniqueKeysWithValues: package.versions.filter { $0.devices > 0 }.map { ($0.version, $0.devices) })
            #expect(devices == onDisk[package.id], "\(package.id)")
        }
        #expect(onDisk["home"] == ["3": Self.devices - reverting.count, "2": reverting.count])
        let docs = try #require(summary.packages.first { $0.id == "docs" })
        let failing = try #require(docs.versions.first { $0.version == "2" })
        #expect(failing.failed == reached.count && failing.failureRate == 1 && failing.activated == 0)
        #expect(
            failing.errors.first?.error.hasPrefix("sha256 mismatch for archives/docs/2/docs-2.tar.gz") == true,
            "\(failing.errors)")
        let home = try #require(summary.packages.first { $0.id == "home" })
        let three = try #require(home.versions.first { $0.version == "3" })
        #expect(three.activated == Self.devices && three.reverted == reverting.count && three.revertRate == 0.2)
        #expect(three.confirmed == Self.devices - reverting.count)
        #expect(home.versions.first { $0.version == "1" }?.confirmed == Self.devices)

        let table = try await InProcessCLI.run([
            "reports", "show", "--db", fleet.database, "--html", fleet.scratch.path("fleet.html"),
        ])
        .checked("show").stdout
        print(table)
        if let keep = ProcessInfo.processInfo.environment["REPORTS_FLEET_PAGE"] {
            try? FileManager.default.removeItem(atPath: keep)
            try FileManager.default.copyItem(atPath: fleet.scratch.path("fleet.html"), toPath: keep)
        }
    }
}
