#if canImport(Glibc)
import Glibc
#endif

/// A path inside a package (relative, `/` separators): a byte string, as docs/protocol.md#conventions says. Two paths are
/// equal only when their bytes are, and they sort by their bytes (what `LC_ALL=C sort` does). A Swift
/// `String` would compare by canonical equivalence and merge a precomposed `é` with `e` + U+0301.
public struct PackagePath: Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let bytes: [UInt8]

    public init(bytes: some Sequence<UInt8>) {
        self.bytes = Array(bytes)
    }

    public init(_ string: String) {
        self.bytes = Array(string.utf8)
    }

    public init(stringLiteral value: String) {
        self.init(value)
    }

    /// By bytes, with `memcmp`: a tree's paths are sorted for its hash, index and lookup table.
    public static func < (lhs: PackagePath, rhs: PackagePath) -> Bool {
        lhs.bytes.withUnsafeBufferPointer { left in
            rhs.bytes.withUnsafeBufferPointer { right in
                let common = min(left.count, right.count)
                let order = common == 0 ? 0 : memcmp(left.baseAddress!, right.baseAddress!, common)
                return order != 0 ? order < 0 : left.count < right.count
            }
        }
    }

    public static func == (lhs: PackagePath, rhs: PackagePath) -> Bool { lhs.bytes == rhs.bytes }

    /// The bytes in one piece: an array's own hashing feeds them to the hasher one at a time, the
    /// most of an unpack's user time in its path dictionaries.
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    public var isEmpty: Bool { bytes.isEmpty }

    /// The path as text, for file-system calls, JSON and URLs: the same bytes whenever they are UTF-8,
    /// which every path that passed `ArchivePath` or `SiteScan` is.
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    /// The path for a message: control characters and bytes that are not UTF-8 escaped (`\xE9`).
    public var description: String { OfflinePkgError.escaped(bytes: bytes) }

    /// The folder holding this path, or nil at the top.
    public var parent: PackagePath? {
        bytes.lastIndex(of: UInt8(ascii: "/")).map { PackagePath(bytes: bytes[..<$0]) }
    }

    public func hasSuffix(_ suffix: PackagePath) -> Bool {
        bytes.count >= suffix.bytes.count && bytes.suffix(suffix.bytes.count).elementsEqual(suffix.bytes)
    }
}
