/// Trimming as Foundation's `trimmingCharacters(in:)` does it with its whitespace sets, which
/// FoundationEssentials lacks: scalar by scalar from both ends.
extension StringProtocol {
    /// Without leading and trailing whitespace as `CharacterSet.whitespaces` counts it: Unicode's space
    /// separators (Zs) and tab. HTTP's optional whitespace (space, tab) is within it.
    package func trimmingWhitespace() -> String { trimming(where: Self.isWhitespace) }

    /// Also without line breaks at either end, as `CharacterSet.whitespacesAndNewlines` counts them.
    package func trimmingWhitespaceAndNewlines() -> String {
        trimming { Self.isWhitespace($0) || Self.isNewline($0) }
    }

    /// Without the scalars at either end for which `isTrimmed` holds.
    package func trimming(where isTrimmed: (Unicode.Scalar) -> Bool) -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !isTrimmed($0) }) else { return "" }
        let end = scalars.index(after: scalars.lastIndex(where: { !isTrimmed($0) })!)
        return String(self[first..<end])
    }

    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "\t" || scalar.properties.generalCategory == .spaceSeparator
    }

    private static func isNewline(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A...0x0D, 0x85, 0x2028, 0x2029: true
        default: false
        }
    }
}
