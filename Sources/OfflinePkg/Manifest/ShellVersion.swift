/// A dotted numeric version such as `3.2` or `10.0.1`, compared component by component
/// (missing components count as zero, so `3.2 == 3.2.0`).
package struct ShellVersion: Comparable, Sendable, CustomStringConvertible {
    package let components: [Int]

    package init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard !parts.isEmpty, parts.count <= 8 else { return nil }
        var components = [Int]()
        for part in parts {
            guard !part.isEmpty, part.utf8.count <= 9, part.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                let value = Int(part)
            else { return nil }
            components.append(value)
        }
        self.components = components
    }

    package var description: String { components.map(String.init).joined(separator: ".") }

    package static func < (lhs: ShellVersion, rhs: ShellVersion) -> Bool {
        let count = max(lhs.components.count, rhs.components.count)
        for index in 0..<count {
            let left = index < lhs.components.count ? lhs.components[index] : 0
            let right = index < rhs.components.count ? rhs.components[index] : 0
            if left != right { return left < right }
        }
        return false
    }

    package static func == (lhs: ShellVersion, rhs: ShellVersion) -> Bool { !(lhs < rhs) && !(rhs < lhs) }

    /// Whether this version is within the upper bound `maximum` (`maxShellVersion`), compared on the
    /// components `maximum` has: a publisher who writes `3.2` means the 3.2 line, so `3.2.7` is within
    /// it and `3.3` is not, as CodePush's `3.2.x` target range and expo's runtime version read.
    package func isWithin(_ maximum: ShellVersion) -> Bool {
        let shown = Array(components.prefix(maximum.components.count))
        return ShellVersion(components: shown) <= maximum
    }

    private init(components: [Int]) { self.components = components }
}
