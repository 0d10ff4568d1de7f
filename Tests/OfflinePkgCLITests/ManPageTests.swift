import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkgCLI

/// `man/offlinepkg.1` against the command table (`CommandSpec`): every command, each with its own flags
/// in its own synopsis, every flag described, every exit status and environment variable named.
@Suite("Man page")
struct ManPageTests {
    /// The man page with roff's `\-` unescaped.
    static let text: String = {
        let man = try? String(
            contentsOf: Fixtures.root.deletingLastPathComponent().appendingPathComponent("man/offlinepkg.1"), encoding: .utf8)
        return (man ?? "").replacingOccurrences(of: "\\-", with: "-")
    }()

    static var lines: [Substring] { text.split(separator: "\n", omittingEmptySubsequences: false) }

    /// The lines of section `.SH name`, up to the next `.SH`.
    static func section(_ name: String) -> [Substring] {
        guard let start = lines.firstIndex(of: Substring(".SH \(name)")) else { return [] }
        let rest = lines[(start + 1)...]
        return Array(rest.prefix { !$0.hasPrefix(".SH ") })
    }

    /// The synopsis of one command: from its `.B offlinepkg NAME` line to the `.br` that ends it.
    static func synopsis(of command: String) -> [Substring] {
        let synopsis = section("SYNOPSIS")
        guard let start = synopsis.firstIndex(of: Substring(".B offlinepkg \(command)")) else { return [] }
        return Array(synopsis[start...].prefix { $0 != ".br" })
    }

    /// Every `--flag` written in `lines`.
    static func flags(in lines: [Substring]) -> Set<String> {
        Set(lines.flatMap { $0.matches(of: /--([a-z][a-z-]*)/).map { String($0.output.1) } })
    }

    @Test(arguments: OfflinePkgCommand.commands.map(\.name))
    func eachCommandsSynopsisListsExactlyItsOwnFlags(_ name: String) throws {
        let command = try #require(OfflinePkgCommand.commands.first { $0.name == name })
        let synopsis = Self.synopsis(of: name)
        #expect(!synopsis.isEmpty, "the man page's SYNOPSIS lacks the command \(name)")
        let documented = Self.flags(in: synopsis)
        for option in command.options {
            #expect(documented.contains(option.name), "the SYNOPSIS of \(name) lacks its --\(option.name)")
        }
        let accepted = Set(command.options.map(\.name))
        for flag in documented.subtracting(accepted).sorted() {
            Issue.record("the SYNOPSIS of \(name) names --\(flag), which \(name) does not take")
        }
    }

    @Test(arguments: OfflinePkgCommand.commands.map(\.name))
    func eachCommandHasAnEntryUnderCommands(_ name: String) {
        let commands = Self.section("COMMANDS")
        let entry = commands.indices.contains { index in
            index > 0 && commands[index - 1] == ".TP"
                && (commands[index] == ".B \(name)" || commands[index].hasPrefix(".B \(name) "))
        }
        #expect(entry, "the man page's COMMANDS section has no entry for \(name)")
    }

    @Test func everyFlagIsDescribedUnderOptions() {
        let options = Self.section("OPTIONS")
        // A description is a `.TP` paragraph whose tag line starts with the flag.
        var described = Set<String>()
        for (index, line) in options.enumerated() where index > 0 && options[index - 1] == ".TP" {
            if let match = line.firstMatch(of: /^\.BI? --([a-z][a-z-]*)/) { described.insert(String(match.output.1)) }
        }
        for command in OfflinePkgCommand.commands {
            for option in command.options {
                #expect(described.contains(option.name), "OPTIONS does not describe --\(option.name) (of \(command.name))")
            }
        }
    }

    /// Each variable the code reads is an entry of its own under ENVIRONMENT: its `.B NAME` line is the
    /// tag of a `.TP` paragraph, not a line run into the paragraph above (which man(1) prints as part of
    /// that entry's text).
    @Test func eachEnvironmentVariableIsAnEntryOfItsOwn() throws {
        let environment = Self.section("ENVIRONMENT")
        let tags = Set(environment.indices.dropFirst().filter { environment[$0 - 1] == ".TP" }.map { environment[$0] })
        for variable in try Self.variablesReadByTheCode() {
            #expect(tags.contains(".B \(variable)"), "ENVIRONMENT has no .TP entry of its own for \(variable)")
        }
    }

    /// Every OFFLINEPKG_* variable the sources and the tests read, plus the XDG fallback.
    static func variablesReadByTheCode() throws -> Set<String> {
        var variables: Set<String> = ["XDG_DATA_HOME"]
        for folder in ["Sources", "Tests"] {
            let files = Fixtures.root.deletingLastPathComponent().appendingPathComponent(folder)
            for case let file as URL in FileManager.default.enumerator(at: files, includingPropertiesForKeys: nil)!
            where file.pathExtension == "swift" {
                let code = try String(contentsOf: file, encoding: .utf8)
                for match in code.matches(of: /OFFLINEPKG_[A-Z_]+/) { variables.insert(String(match.output)) }
            }
        }
        return variables
    }

    @Test func theManPageNamesEveryCommandAndOption() throws {
        let text = Self.text
        #expect(!text.isEmpty, "man/offlinepkg.1 is missing or empty")
        for command in OfflinePkgCommand.commands {
            #expect(text.contains(".B offlinepkg \(command.name)"), "man page lacks the command \(command.name)")
            for option in command.options {
                #expect(text.contains("--\(option.name)"), "man page lacks --\(option.name) of \(command.name)")
            }
        }
        for status in 0...4 { #expect(text.contains(".B \(status)\n")) }
        let variables = try Self.variablesReadByTheCode()
        #expect(variables.isSuperset(of: ["OFFLINEPKG_ROOT", "OFFLINEPKG_FAILPOINT", "OFFLINEPKG_SKIP_BROWSER"]))
        for variable in variables { #expect(text.contains(variable), "man page lacks \(variable)") }
    }
}
