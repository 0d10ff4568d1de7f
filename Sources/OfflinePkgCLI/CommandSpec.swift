/// One command's arguments and options: the single table that drives parsing, `--help` and the man
/// page test (swift-argument-parser's shape, without the dependency).
struct CommandSpec: Sendable {
    struct Option: Sendable {
        /// Long name without dashes, e.g. `root`.
        var name: String
        /// Placeholder for the value (`DIR`), nil for a flag.
        var value: String?
        var repeatable = false
        var help: String
    }

    var name: String
    /// Positional arguments in order, e.g. `["<manifest-url>"]`.
    var arguments: [String]
    var options: [Option]
    var summary: String
    var run: @Sendable (ParsedArguments, CLIContext) async throws -> Int32

    var usage: String {
        var parts = ["offlinepkg", name] + arguments
        for option in options {
            let text = option.value.map { "--\(option.name) \($0)" } ?? "--\(option.name)"
            parts.append("[\(text)]" + (option.repeatable ? "..." : ""))
        }
        return parts.joined(separator: " ")
    }

    var help: String {
        var lines = ["usage: \(usage)", "", summary, ""]
        let flags = options.map { option in option.value.map { "--\(option.name) \($0)" } ?? "--\(option.name)" }
        // Two spaces at least between the longest flag and its help.
        let column = max(26, (flags.map(\.count).max() ?? 0) + 2)
        for (flag, option) in zip(flags, options) {
            lines.append("  " + Self.padded(flag, to: column) + option.help)
        }
        return lines.joined(separator: "\n")
    }

    /// `text` and spaces up to `width` characters: the column of a help table (never cut).
    static func padded(_ text: String, to width: Int) -> String {
        text + String(repeating: " ", count: max(0, width - text.count))
    }
}

/// Shared options, spelled once.
extension CommandSpec.Option {
    static let root = Self(
        name: "root", value: "DIR",
        help: "cache root (default $OFFLINEPKG_ROOT, $XDG_DATA_HOME/offlinepkg, ~/.local/share/offlinepkg)")
    static let json = Self(name: "json", value: nil, help: "print one JSON object on stdout")
    static let quiet = Self(name: "quiet", value: nil, help: "print no progress")
    static let wait = Self(name: "wait", value: nil, help: "wait for another sync of the root instead of exiting 3")
}

/// A command line parsed against a `CommandSpec`.
struct ParsedArguments: Sendable {
    var positionals: [String] = []
    var values: [String: [String]] = [:]

    func value(_ name: String) -> String? { values[name]?.last }
    func all(_ name: String) -> [String] { values[name] ?? [] }
    func flag(_ name: String) -> Bool { values[name] != nil }

    func integer(_ name: String, in range: ClosedRange<Int>) throws -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), range.contains(number) else {
            throw UsageError("--\(name) takes a whole number from \(range.lowerBound) to \(range.upperBound), got \"\(text)\"")
        }
        return number
    }

    func seconds(_ name: String) throws -> Double? {
        guard let text = value(name) else { return nil }
        guard let number = Double(text), number >= 0, number.isFinite else {
            throw UsageError("--\(name) takes a number of seconds, got \"\(text)\"")
        }
        return number
    }
}

/// A mistake in how the command was called: exit status 2.
struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension CommandSpec {
    func parse(_ arguments: [String]) throws -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositionals || !argument.hasPrefix("--") || argument == "-" {
                if argument.hasPrefix("-") && argument.count > 1 && !onlyPositionals && argument != "-" {
                    throw UsageError("unknown option \(argument) for \(name)")
                }
                parsed.positionals.append(argument)
                continue
            }
            if argument == "--" {
                onlyPositionals = true
                continue
            }
            var key = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = key.firstIndex(of: "=") {
                inlineValue = String(key[key.index(after: equals)...])
                key = String(key[..<equals])
            }
            guard let option = options.first(where: { $0.name == key }) else {
                throw UsageError("unknown option --\(key) for \(name)")
            }
            if option.value == nil {
                if inlineValue != nil { throw UsageError("--\(key) takes no value") }
                parsed.values[key, default: []].append("")
                continue
            }
            guard let value = inlineValue ?? (index < arguments.count ? arguments[index] : nil) else {
                throw UsageError("--\(key) needs a value (\(option.value!))")
            }
            if inlineValue == nil { index += 1 }
            if !option.repeatable && parsed.values[key] != nil { throw UsageError("--\(key) given twice") }
            parsed.values[key, default: []].append(value)
        }
        // `<name>` is required, `[name]` optional.
        let required = self.arguments.filter { $0.hasPrefix("<") }
        if parsed.positionals.count < required.count {
            throw UsageError("\(name) needs \(required.joined(separator: " "))")
        }
        // `<name>...`, last: one or more.
        if self.arguments.last?.hasSuffix("...") == true { return parsed }
        if parsed.positionals.count > self.arguments.count {
            throw UsageError(
                "\(name) takes \(self.arguments.isEmpty ? "no arguments" : self.arguments.joined(separator: " ")), got \"\(parsed.positionals[self.arguments.count])\""
            )
        }
        return parsed
    }
}
