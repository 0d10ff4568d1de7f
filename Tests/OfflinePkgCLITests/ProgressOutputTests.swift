import Foundation
import OfflinePkgTestSupport
import Testing

/// Progress goes to stderr: bars on a terminal, plain lines otherwise, nothing with --quiet; --json
/// prints one JSON object on stdout.
@Suite("Progress output")
struct ProgressOutputTests {
    static func repository() throws -> TestRepository {
        let repo = try TestRepository()
        try repo.add(
            "home", "1", routes: ["https://m.example.com/"],
            files: [
                SiteFile("index.html", "x"), SiteFile("big.bin", bytes: (0..<400_000).map { _ in UInt8.random(in: 0...255) }),
            ])
        try repo.publish()
        return repo
    }

    @Test func plainLinesWhenStderrIsNotATerminal() async throws {
        let repo = try Self.repository()
        let result = try await InProcessCLI.run(["sync", repo.manifestPath, "--root", try TemporaryDirectory().path]).checked()
        #expect(result.stderr.contains("checking file://"))
        #expect(result.stderr.contains("fetching home 1"))
        #expect(result.stderr.contains("activated set 1"))
        #expect(!result.stderr.contains("\u{1B}["))
        #expect(result.stdout.hasPrefix("activated set 1"))
    }

    @Test func nothingWithQuietAndOneObjectWithJSON() async throws {
        let repo = try Self.repository()
        let quiet = try await InProcessCLI.run(["sync", repo.manifestPath, "--root", try TemporaryDirectory().path, "--quiet"])
            .checked()
        #expect(quiet.stderr.isEmpty && quiet.stdout.isEmpty)
        let json = try await InProcessCLI.run([
            "sync", repo.manifestPath, "--root", try TemporaryDirectory().path, "--json", "--quiet",
        ]).checked()
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(object?["outcome"] as? String == "activated")
        #expect(json.stdout.split(separator: "\n").count == 1)
    }

    /// --json changes stdout only: progress still goes to stderr, as lines when it is not a terminal.
    @Test func jsonKeepsProgressOnStderr() async throws {
        let repo = try Self.repository()
        let json = try await InProcessCLI.run(["sync", repo.manifestPath, "--root", try TemporaryDirectory().path, "--json"])
            .checked()
        #expect(json.stderr.contains("fetching home 1") && json.stderr.contains("activated set 1"))
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(object?["outcome"] as? String == "activated")
        #expect(json.stdout.split(separator: "\n").count == 1)
    }

    @Test func barsOnATerminal() async throws {
        let repo = try Self.repository()
        // util-linux `script` runs the command on a pseudo-terminal, as a person at a shell would.
        let command = "\(OfflinePkgBinary.path) sync \(repo.manifestPath) --root \(try TemporaryDirectory().path)"
        let result = try run("script", ["-qec", command, "/dev/null"]).checked()
        #expect(result.stdout.contains("\r\u{1B}[K"))
        #expect(result.stdout.contains("[##############################]"), "a full progress bar")
        #expect(result.stdout.contains("activated set 1"))
    }
}
