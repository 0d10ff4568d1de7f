import Foundation

/// Where the hostile-archive tests leave a copy of every archive they build, when
/// `OFFLINEPKG_HOSTILE_OUT=DIR` is set, so that `scripts/corpus DIR` can run them all through a real sync.
public enum HostileCorpus {
    /// Copies `archive` into the corpus folder as `name` (made unique), or does nothing when unset.
    public static func keep(_ archive: String, as name: String) {
        guard let folder = ProcessInfo.processInfo.environment["OFFLINEPKG_HOSTILE_OUT"], !folder.isEmpty else { return }
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let safe = String(name.map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? $0 : "_" })
        var target = folder + "/" + safe
        var index = 1
        while FileManager.default.fileExists(atPath: target) {
            index += 1
            target = folder + "/\(index)-" + safe
        }
        try? FileManager.default.copyItem(atPath: archive, toPath: target)
    }
}

/// A tar written byte by byte, as an attacker edits headers: any type flag with any link name, pax
/// records of any shape, sizes that lie.
public struct TarBuilder {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// A ustar header and its data (padded to 512). `size` overrides the size field (a lie).
    public mutating func entry(
        _ name: String, type: Character = "0", data: [UInt8] = [], linkname: String = "", mode: Int = 0o644,
        size: Int? = nil
    ) {
        var header = [UInt8](repeating: 0, count: 512)
        func put(_ text: String, at offset: Int, width: Int) {
            for (index, byte) in text.utf8.prefix(width).enumerated() { header[offset + index] = byte }
        }
        func octal(_ value: Int, at offset: Int, width: Int) {
            let digits = String(value, radix: 8)
            put(String(repeating: "0", count: max(0, width - 1 - digits.count)) + digits, at: offset, width: width - 1)
        }
        put(name, at: 0, width: 100)
        octal(mode, at: 100, width: 8)
        octal(0, at: 108, width: 8)
        octal(0, at: 116, width: 8)
        octal(size ?? data.count, at: 124, width: 12)
        octal(1_700_000_000, at: 136, width: 12)
        header[156] = type.asciiValue!
        put(linkname, at: 157, width: 100)
        put("ustar\0", at: 257, width: 6)
        put("00", at: 263, width: 2)
        put("root", at: 265, width: 32)
        put("root", at: 297, width: 32)
        for index in 148..<156 { header[index] = 0x20 }
        let sum = header.reduce(0) { $0 + Int($1) }
        let digits = String(sum, radix: 8)
        put(String(repeating: "0", count: 6 - digits.count) + digits + "\0 ", at: 148, width: 8)
        bytes += header + data
        bytes += [UInt8](repeating: 0, count: (512 - data.count % 512) % 512)
    }

    /// A pax extended header ('x') holding `body` as is, for the entry that follows.
    public mutating func pax(body: [UInt8]) {
        entry("PaxHeader/f", type: "x", data: body)
    }

    /// A pax extended header from well-formed records.
    public mutating func pax(_ records: [(String, String)]) {
        pax(body: records.flatMap { Self.record($0.0, $0.1) })
    }

    /// One pax record, `"<length> key=value\n"`, its length counting itself.
    public static func record(_ key: String, _ value: String) -> [UInt8] {
        let body = " \(key)=\(value)\n"
        var length = body.utf8.count + 1
        while String(length).count + body.utf8.count != length { length += 1 }
        return Array("\(length)\(body)".utf8)
    }

    /// The archive with its two zero blocks.
    public func finished() -> [UInt8] { bytes + [UInt8](repeating: 0, count: 1024) }
}

/// Byte surgery on a zip written by bsdtar: the fields a hostile writer would set.
public enum ZipSurgery {
    /// Offsets of every record with this 4-byte signature (`PK\1\2` central, `PK\3\4` local).
    public static func offsets(of signature: [UInt8], in zip: [UInt8]) -> [Int] {
        guard zip.count >= 4 else { return [] }
        return (0...(zip.count - 4)).filter { zip[$0..<($0 + 4)].elementsEqual(signature) }
    }

    public static let central: [UInt8] = [0x50, 0x4b, 0x01, 0x02]
    public static let local: [UInt8] = [0x50, 0x4b, 0x03, 0x04]

    public static func put32(_ value: UInt32, at offset: Int, in zip: inout [UInt8]) {
        for index in 0..<4 { zip[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(index))) }
    }

    /// Sets the central directory's external attributes (a Unix mode in the top 16 bits) of every entry,
    /// and says "made by Unix" so readers take the mode.
    public static func setUnixMode(_ mode: UInt32, in zip: inout [UInt8]) {
        for offset in offsets(of: central, in: zip) {
            zip[offset + 5] = 3
            put32(mode << 16, at: offset + 38, in: &zip)
        }
    }

    /// Writes `size` as the uncompressed size in every local and central header (a lie about the data).
    public static func declareUncompressedSize(_ size: UInt32, in zip: inout [UInt8]) {
        for offset in offsets(of: local, in: zip) { put32(size, at: offset + 22, in: &zip) }
        for offset in offsets(of: central, in: zip) { put32(size, at: offset + 24, in: &zip) }
    }

    /// The offset of the first entry's data (after its local header, name and extra field).
    public static func firstDataOffset(in zip: [UInt8]) -> Int {
        let nameLength = Int(zip[26]) | Int(zip[27]) << 8
        let extraLength = Int(zip[28]) | Int(zip[29]) << 8
        return 30 + nameLength + extraLength
    }
}

/// Everything under a folder as lstat sees it: type, mode and content of each name. Two snapshots
/// compare equal only when nothing was added, removed, re-moded or rewritten (links are not followed).
public struct FolderSnapshot: Equatable, CustomStringConvertible {
    public struct Item: Equatable {
        public var mode: UInt32
        public var contents: [UInt8]
    }

    public private(set) var items: [String: Item] = [:]

    public init(_ root: String) throws {
        let enumerator = FileManager.default.enumerator(atPath: root)
        items["."] = try Self.item(root)
        while let relative = enumerator?.nextObject() as? String {
            items[relative] = try Self.item(root + "/" + relative)
        }
    }

    private static func item(_ path: String) throws -> Item {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw TestSupportError("lstat \(path) failed") }
        var contents = [UInt8]()
        if info.st_mode & S_IFMT == S_IFREG {
            contents = [UInt8](FileManager.default.contents(atPath: path) ?? Data())
        } else if info.st_mode & S_IFMT == S_IFLNK {
            contents = Array(((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "").utf8)
        }
        return Item(mode: UInt32(info.st_mode), contents: contents)
    }

    public var description: String {
        items.keys.sorted().map { "\($0) \(String(items[$0]!.mode, radix: 8)) \(items[$0]!.contents.count)B" }
            .joined(separator: ", ")
    }
}
