import Foundation
import OfflinePkgTestSupport
import Testing

/// A publisher's repository, a signing key and a device root, all driven through the `offlinepkg`
/// binary, for the fleet-operation tests (docs/cron.md).
struct FleetDevice {
    let scratch: TemporaryDirectory
    var repo: String { scratch.path("repo") }
    var root: String { scratch.path("root") }
    var key: String { scratch.path("key") }
    private let publishes = PublishCounter()

    /// nginx's ETag and Last-Modified have one-second resolution: two publishes within a second with
    /// manifests of one size would look unchanged to a conditional request. Each gets its own mtime.
    final class PublishCounter: @unchecked Sendable {
        // Used from one test at a time.
        var count = 0
    }

    init() async throws {
        scratch = try TemporaryDirectory(prefix: "offlinepkg-fleet")
        try await InProcessCLI.run(["keygen", key]).checked("keygen")
    }

    /// Publishes `home <version>` (index.html says "home <version>", plus `padding` random bytes) into
    /// `repo` (default: this device's repository), signed.
    @discardableResult
    func publish(_ version: String, repo: String? = nil, padding: Int = 0, _ extra: [String] = []) async throws -> ProcessResult {
        let site = scratch.path("sites/\(version)")
        var files = [SiteFile("index.html", "home \(version)")]
        if padding > 0 { files.append(SiteFile("noise.bin", bytes: try CrashSafetyTests.randomBytes(padding))) }
        try? FileManager.default.removeItem(atPath: site)
        try writeSite(files, to: site)
        let result = try await InProcessCLI.run(
            ["publish", site, "--repo", repo ?? self.repo, "--id", "home", "--version", version, "--route",
             "https://m.example.com/", "--sign-key", key + ".key", "--quiet"] + extra
        ).checked("publish \(version)")
        publishes.count += 1
        for name in ["manifest.json", "manifest.json.minisig"] {
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(Double(publishes.count))],
                ofItemAtPath: (repo ?? self.repo) + "/" + name)
        }
        return result
    }

    /// `offlinepkg sync URL --root R --trust-key K` plus `options`; the result, whatever its status.
    func sync(_ url: String, _ options: [String] = [], environment: [String: String]? = nil) async throws -> ProcessResult {
        await InProcessCLI.run(
            ["sync", url, "--root", root, "--trust-key", key + ".pub", "--quiet"] + options, environment: environment)
    }

    /// `status --json` as an object.
    func status() async throws -> [String: Any] {
        let result = try await InProcessCLI.run(["status", "--root", root, "--json"]).checked("status")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    /// The home page the root serves now, or nil on a miss.
    func served() async throws -> String? {
        let lookup = await InProcessCLI.run(["lookup", "https://m.example.com/", "--root", root])
        guard lookup.status == 0 else { return nil }
        return try String(contentsOfFile: String(lookup.stdout.dropLast()), encoding: .utf8)
    }

    func activeRecord() -> Data? { FileManager.default.contents(atPath: root + "/active.json") }
}

/// One JSON object from a command's stdout.
func jsonObject(_ text: String) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
}
