import Foundation
import OfflinePkgTestSupport
import Testing

/// Where the cache root is without `--root` (man/offlinepkg.1): `$OFFLINEPKG_ROOT`, else
/// `$XDG_DATA_HOME/offlinepkg`, else `~/.local/share/offlinepkg`; an empty variable counts as unset.
@Suite("Cache root")
struct CacheRootTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        /// Variables set for the run: "ROOT", "XDG" and "HOME" stand for three scratch folders.
        var variables: [String: String]
        var arguments: [String] = []
        /// The root the sync must have used, in the same placeholders.
        var expected: String
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "OFFLINEPKG_ROOT first",
            variables: ["OFFLINEPKG_ROOT": "ROOT", "XDG_DATA_HOME": "XDG", "HOME": "HOME"], expected: "ROOT"),
        Case(name: "then XDG_DATA_HOME", variables: ["XDG_DATA_HOME": "XDG", "HOME": "HOME"], expected: "XDG/offlinepkg"),
        Case(name: "then HOME", variables: ["HOME": "HOME"], expected: "HOME/.local/share/offlinepkg"),
        Case(
            name: "empty variables count as unset",
            variables: ["OFFLINEPKG_ROOT": "", "XDG_DATA_HOME": "", "HOME": "HOME"], expected: "HOME/.local/share/offlinepkg"),
        Case(
            name: "--root wins", variables: ["OFFLINEPKG_ROOT": "ROOT", "HOME": "HOME"], arguments: ["--root", "XDG/explicit"],
            expected: "XDG/explicit"),
    ]

    @Test(arguments: cases)
    func syncUsesTheRootTheEnvironmentNames(_ rootCase: Case) async throws {
        let scratch = try TemporaryDirectory()
        func place(_ text: String) -> String {
            ["ROOT", "XDG", "HOME"].reduce(text) { text, name in
                text.hasPrefix(name) ? scratch.path(name.lowercased()) + text.dropFirst(name.count) : text
            }
        }
        var environment = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"]
        for (name, value) in rootCase.variables { environment[name] = place(value) }
        let manifest = Fixtures.url("demo-repo/manifest.json").path
        try await InProcessCLI.run(["sync", manifest, "--quiet"] + rootCase.arguments.map(place), environment: environment)
            .checked("offlinepkg sync")
        let expected = place(rootCase.expected)
        #expect(FileManager.default.fileExists(atPath: expected + "/active.json"), "no active set in \(expected)")
        // No other candidate was touched.
        let others = ["root", "xdg/offlinepkg", "home/.local/share/offlinepkg"].map(scratch.path).filter { $0 != expected }
        for other in others { #expect(!FileManager.default.fileExists(atPath: other + "/active.json"), "\(other) was used") }
        let status = try await InProcessCLI.run(["status", "--json"] + rootCase.arguments.map(place), environment: environment)
            .checked("offlinepkg status")
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        #expect(object?["root"] as? String == expected)
        #expect((object?["active"] as? [String: Any])?["generation"] as? Int == 1)
    }
}
