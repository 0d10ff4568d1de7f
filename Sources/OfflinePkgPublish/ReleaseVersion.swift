/// A package version as `publish` orders versions to refuse a downgrade: dotted numbers (`1.4.2`,
/// `2024.05.1`), optionally followed by a pre-release (`-beta.2`) and build metadata (`+git.3f2a`), and
/// ordered as Semantic Versioning orders them: the numbers one by one (a missing one counts as 0, so
/// `1.4` equals `1.4.0`), then a pre-release before the release itself (`1.4.2-rc.1` < `1.4.2`), its
/// identifiers compared numerically when both are numbers and as ASCII text otherwise; build metadata
/// does not count. A version that does not start with a number (`v1.2`, a git hash, `release-7`) has no
/// order: `publish` cannot tell whether it is older, and does not refuse it.
package struct ReleaseVersion: Comparable, Sendable, CustomStringConvertible {
    package let text: String
    private let numbers: [Int]
    /// Nil for a release; the dot-separated identifiers of a pre-release.
    private let prerelease: [Substring]?

    package init?(_ text: String) {
        var rest = Substring(text)
        if let plus = rest.firstIndex(of: "+") { rest = rest[..<plus] }
        var prerelease: [Substring]?
        if let dash = rest.firstIndex(of: "-") {
            let identifiers = rest[rest.index(after: dash)...].split(separator: ".", omittingEmptySubsequences: false)
            guard identifiers.allSatisfy({ !$0.isEmpty }) else { return nil }
            prerelease = identifiers
            rest = rest[..<dash]
        }
        var numbers = [Int]()
        for part in rest.split(separator: ".", omittingEmptySubsequences: false) {
            guard (1...18).contains(part.utf8.count), part.utf8.allSatisfy(Self.isDigit), let number = Int(part) else {
                return nil
            }
            numbers.append(number)
        }
        self.text = text
        self.numbers = numbers
        self.prerelease = prerelease
    }

    package var description: String { text }

    private static func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }

    /// A pre-release identifier made of digits only, as a number.
    private static func numeric(_ identifier: Substring) -> Int? {
        identifier.utf8.count <= 18 && identifier.utf8.allSatisfy(isDigit) ? Int(identifier) : nil
    }

    package static func < (lhs: ReleaseVersion, rhs: ReleaseVersion) -> Bool {
        for index in 0..<max(lhs.numbers.count, rhs.numbers.count) {
            let left = index < lhs.numbers.count ? lhs.numbers[index] : 0
            let right = index < rhs.numbers.count ? rhs.numbers[index] : 0
            if left != right { return left < right }
        }
        switch (lhs.prerelease, rhs.prerelease) {
        case (nil, _): return false
        case (_, nil): return true
        case (let left?, let right?):
            for (a, b) in zip(left, right) where a != b {
                switch (numeric(a), numeric(b)) {
                case (let x?, let y?): return x < y
                case (.some, nil): return true  // numeric identifiers come first
                case (nil, .some): return false
                case (nil, nil): return a.utf8.lexicographicallyPrecedes(b.utf8)
                }
            }
            return left.count < right.count
        }
    }

    package static func == (lhs: ReleaseVersion, rhs: ReleaseVersion) -> Bool { !(lhs < rhs) && !(rhs < lhs) }
}
