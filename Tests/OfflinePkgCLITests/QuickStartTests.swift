import Foundation
import OfflinePkgTestSupport
import Testing

/// The docs a newcomer follows, run as written: every `sh` block of docs/quickstart.md in one shell
/// (only the ports of its first line are free ones of the test's own), its output checked against the
/// `text` blocks the doc shows; and the README's Chromium snippet, which must wait for serve's ready
/// line before it asks for the pin. Chromium drives the quick start's last steps, so
/// `OFFLINEPKG_SKIP_BROWSER=1` skips it as it skips the browser suites.
@Suite("Docs run as written")
struct QuickStartTests {
    static let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    static let skipBrowser = ProcessInfo.processInfo.environment["OFFLINEPKG_SKIP_BROWSER"] == "1"

    /// The fenced blocks of `language` in a Markdown file, in order.
    static func blocks(_ language: String, in file: String) throws -> [String] {
        let text = try String(contentsOfFile: checkout + "/" + file, encoding: .utf8)
        var blocks = [String]()
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```\(language)" {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    /// Two ports nothing listens on.
    static func freePorts() throws -> (Int, Int) {
        var ports = [Int]()
        for _ in 0..<200 where ports.count < 2 {
            let port = Int.random(in: 20000...60000)
            if !ports.contains(port) && NginxServer.portLooksFree(port) { ports.append(port) }
        }
        try #require(ports.count == 2, "no free ports")
        return (ports[0], ports[1])
    }

    /// `PATH` with the binary under test first, as `make install` would put it.
    static var path: String { (OfflinePkgBinary.path as NSString).deletingLastPathComponent + ":/usr/sbin:/usr/bin:/sbin:/bin" }

    /// A line of a `text` block as a pattern: what differs from run to run (a key id, the scratch folder,
    /// a time) matches anything of its kind; the rest is matched as written.
    static func pattern(_ line: String) -> Regex<AnyRegexOutput> {
        let variable = /key id [0-9A-F]{16}|\/tmp\/tmp\.[A-Za-z0-9]{10}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/
        var pattern = "^"
        var rest = Substring(line)
        while let match = rest.firstMatch(of: variable) {
            pattern += NSRegularExpression.escapedPattern(for: String(rest[..<match.range.lowerBound]))
            let token = match.output
            pattern += token.hasPrefix("key id") ? "key id [0-9A-F]{16}" : token.hasPrefix("/") ? "/\\S+" : "\\S+"
            rest = rest[match.range.upperBound...]
        }
        return try! Regex(pattern + NSRegularExpression.escapedPattern(for: String(rest)) + "$")
    }

    @Test(.disabled(if: skipBrowser, "OFFLINEPKG_SKIP_BROWSER=1"))
    func theQuickStartRunsAsWritten() throws {
        let commands = try Self.blocks("sh", in: "docs/quickstart.md")
        #expect(commands.count >= 7)
        let first = "export REPO_PORT=8080 SERVE_PORT=8443   # two free ports on 127.0.0.1"
        try #require(commands[0].hasPrefix(first + "\n"), "the quick start's first line changed: \(commands[0])")
        let (repoPort, servePort) = try Self.freePorts()
        let script = commands.joined(separator: "\n")
            .replacingOccurrences(of: "REPO_PORT=8080 SERVE_PORT=8443", with: "REPO_PORT=\(repoPort) SERVE_PORT=\(servePort)")
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = Self.path
        for name in ["OFFLINEPKG_ROOT", "OFFLINEPKG_SHELL_VERSION", "XDG_DATA_HOME"] { environment[name] = nil }
        let result = try run(
            "bash", ["-euo", "pipefail", "-c", script], environment: environment, currentDirectory: NSTemporaryDirectory(),
            timeout: 240, killingGroup: true)
        #expect(result.status == 0, "the quick start failed:\n\(result.stdout)\n\(result.stderr.suffix(3000))")
        let lines = (result.stdout + result.stderr).split(separator: "\n").map(String.init)
        for block in try Self.blocks("text", in: "docs/quickstart.md") {
            for expected in block.split(separator: "\n").map(String.init) {
                let pattern = Self.pattern(expected)
                #expect(
                    lines.contains { $0.wholeMatch(of: pattern) != nil },
                    "the doc shows \"\(expected)\"; the run printed:\n\(lines.joined(separator: "\n"))")
            }
        }
    }

    /// docs/seed-release.md's "Try it": a seed synced from the shell's own files, then an update from
    /// the network, on one machine.
    @Test func theSeedGuideRunsAsWritten() throws {
        let script = try #require(
            try Self.blocks("sh", in: "docs/seed-release.md").first { $0.contains("offlinepkg keygen app") })
        let scratch = try TemporaryDirectory()
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = Self.path
        let result = try run(
            "bash", ["-euo", "pipefail", "-c", script], environment: environment, currentDirectory: scratch.path)
        #expect(result.status == 0, "\(result.stderr)")
        let shown = try #require(try Self.blocks("text", in: "docs/seed-release.md").last)
        #expect(result.stdout == shown + "\n", "\(result.stdout)")
    }

    /// The README's Chromium snippet asks `status` for the pin only once serve has printed its URL: on a
    /// fresh root there is no certificate, hence no pin, before. A serve that takes a second to start
    /// (here a wrapper that sleeps first) shows whether it waits; one that exits, whether the wait ends.
    @Test func theReadmeChromiumSnippetWaitsForServesReadyLine() async throws {
        let snippet = try #require(
            try Self.blocks("sh", in: "README.md").first { $0.contains("--ignore-certificate-errors-spki-list") })
        let lines = snippet.split(separator: "\n").map(String.init)
        let upToPin = try #require(lines.firstIndex { $0.hasPrefix("pin=") })
        let scratch = try TemporaryDirectory()
        let bin = try scratch.makeDirectory("bin")
        let wrapper = try scratch.write(
            "#!/bin/sh\nif [ \"$1\" = serve ]; then sleep 1; fi\nexec '\(OfflinePkgBinary.path)' \"$@\"\n", to: "bin/offlinepkg")
        chmod(wrapper, 0o755)
        let device = try await FleetDevice()
        try await device.publish("1")
        try await device.sync(device.repo + "/manifest.json").checked()
        let (_, port) = try Self.freePorts()
        let script =
            lines[...upToPin].joined(separator: "\n").replacingOccurrences(of: "8443", with: "\(port)")
            + "\nprintf '%s' \"$pin\"\nkill %1\n"
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = bin + ":" + Self.path
        environment["OFFLINEPKG_ROOT"] = device.root
        let result = try run(
            "bash", ["-euo", "pipefail", "-c", script], environment: environment, currentDirectory: scratch.path, timeout: 60,
            killingGroup: true)
        #expect(result.status == 0, "\(result.stderr)")
        let pin = result.stdout
        #expect(
            pin != "null" && Data(base64Encoded: pin)?.count == 32, "the snippet read the pin before serve made it: \"\(pin)\"")

        // A serve that exits (its port taken) ends the wait instead of leaving it to spin.
        try scratch.write(
            "#!/bin/sh\nif [ \"$1\" = serve ]; then echo 'port taken' >&2; exit 1; fi\nexec '\(OfflinePkgBinary.path)' \"$@\"\n",
            to: "bin/offlinepkg")
        try FileManager.default.removeItem(atPath: scratch.path("serve.url"))
        let failed = try run(
            "bash", ["-uo", "pipefail", "-c", script], environment: environment, currentDirectory: scratch.path, timeout: 20,
            killingGroup: true)
        #expect(failed.status != 128 + 9, "the snippet waited on for a serve that had exited")
        #expect(failed.stderr.contains("port taken"), "\(failed.stderr)")
    }
}
