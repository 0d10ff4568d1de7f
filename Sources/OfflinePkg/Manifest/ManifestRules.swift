import FoundationEssentials

/// The rules of docs/protocol.md#package-entries for the values of one package entry, written once: the manifest parser checks
/// what a device reads against them, and the publisher what it is asked to write, so a release
/// `publish` accepts is one a device accepts. Each `…Problem` returns why a value breaks its rule (a
/// phrase that follows the value in a message), or nil; each caller names the value its own way.
package enum ManifestRules {
    package static let idPattern = "[a-z0-9][a-z0-9._-]{0,63}"
    package static let versionPattern = "[A-Za-z0-9._+-]{1,64}"
    /// `rollout`: the percentage of devices that take the release.
    package static let rolloutRange = 0...100

    /// `[a-z0-9][a-z0-9._-]{0,63}`
    package static func isValidID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        func lowerAlnum(_ byte: UInt8) -> Bool { (0x61...0x7a).contains(byte) || (0x30...0x39).contains(byte) }
        return lowerAlnum(bytes[0]) && bytes.dropFirst().allSatisfy { lowerAlnum($0) || $0 == 0x2e || $0 == 0x5f || $0 == 0x2d }
    }

    /// `[A-Za-z0-9._+-]{1,64}`, for `version` and a delta's `from`.
    package static func isValidVersion(_ version: String) -> Bool {
        let bytes = Array(version.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        return bytes.allSatisfy { byte in
            (0x61...0x7a).contains(byte) || (0x41...0x5a).contains(byte) || (0x30...0x39).contains(byte)
                || byte == 0x2e || byte == 0x5f || byte == 0x2b || byte == 0x2d
        }
    }

    /// A route prefix: an absolute http(s) URL written as a browser sends it (`RouteSyntax`).
    package static func routeProblem(_ route: String) -> String? { RouteSyntax.problem(with: route) }

    /// `entry` and `fallback`: a relative path of a file inside the package, in normal form (no `./`,
    /// `..`, empty segment or trailing `/`), by the archive member rules of docs/protocol.md#archives.
    package static func filePathProblem(_ path: String) -> String? { ArchivePath.validate(path) }

    /// `minShellVersion` and `maxShellVersion`: dotted decimal numbers.
    package static func shellVersionProblem(_ version: String) -> String? {
        ShellVersion(version) == nil ? "is not a dotted numeric version" : nil
    }

    package static func rolloutProblem(_ rollout: Int) -> String? {
        rolloutRange.contains(rollout)
            ? nil : "must be between \(rolloutRange.lowerBound) and \(rolloutRange.upperBound), got \(rollout)"
    }

    /// `reports.url` (docs/protocol.md#install-reports): where devices POST their install reports, an absolute http(s) URL with
    /// a host and no fragment or user, at most `maximumReportsURLBytes`. Checked by the publisher and by
    /// every device: a report's body must never be sent somewhere a reader of the manifest would not see.
    package static func reportsURLProblem(_ url: String) -> String? {
        guard url.utf8.count <= maximumReportsURLBytes else { return "is longer than \(maximumReportsURLBytes) bytes" }
        guard !url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7f }) else {
            return "holds a space or a control character"
        }
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty
        else { return "is not an absolute http or https URL" }
        if components.user != nil || components.password != nil { return "must not carry a user or password" }
        if components.fragment != nil { return "must not have a fragment" }
        return nil
    }

    package static let maximumReportsURLBytes = 2048
}
