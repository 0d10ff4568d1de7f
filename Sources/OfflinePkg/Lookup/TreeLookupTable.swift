#if canImport(Glibc)
import Glibc
#endif

/// The lookup table of one installed tree: a hash table from a file's relative path (its bytes) to its
/// size and sha256, written once when the tree is installed (`<tree>.lookup`) and then only read,
/// through a read-only memory map. Every process that opens the root shares its pages through the page
/// cache, and a resolve touches only the pages it probes: opening a root costs one `mmap` per package,
/// not a parse of every file's line (which would cost anonymous memory and time in proportion to the
/// files, at every open).
///
/// Layout, little-endian, every section 8-byte aligned:
///
///     header   32 bytes  magic "OPKLKP01", file count, slot count (a power of two),
///                        offsets of the records, the slots and the strings, the strings' length (u32 each)
///     records  48 bytes  sha256 (32 raw bytes), size (u64), path offset and length in the strings (u32 each)
///     slots     8 bytes  32 bits of the path's hash, record number + 1 (0: empty); at most half full
///     strings            the paths, back to back
///
/// About 64 bytes per file plus its path. A damaged file answers misses, never out-of-bounds reads:
/// every offset is checked against the mapping when it is used.
package final class TreeLookupTable: Sendable {
    private static let magic: [UInt8] = Array("OPKLKP01".utf8)
    private static let headerSize = 32
    private static let recordSize = 48
    private static let slotSize = 8

    /// One file as the table holds it.
    package struct Record: Equatable {
        package var sha256: String
        package var size: Int64
    }

    private let bytes: MappedBytes
    package let fileCount: Int
    private let slotMask: Int
    private let recordsOffset: Int
    private let slotsOffset: Int
    private let stringsOffset: Int
    private let stringsLength: Int

    /// Maps the table at `path`; throws when it is missing or not a table of this format.
    package convenience init(contentsOf path: String) throws {
        try self.init(bytes: MappedBytes(mapping: path), path: path)
    }

    /// A table held in memory (a tree installed before tables were written).
    package convenience init(encoding files: [PackagePath: TreeFile]) {
        // An encoding of our own always reads back.
        try! self.init(bytes: MappedBytes(copying: Self.encode(files)), path: "(memory)")
    }

    private init(bytes: MappedBytes, path: String) throws {
        func corrupt(_ reason: String) -> OfflinePkgError { .corruptState(path: path, reason: reason) }
        let raw = bytes.buffer
        guard raw.count >= Self.headerSize, Self.magic.elementsEqual(raw[0..<8]) else {
            throw corrupt("not a lookup table (no OPKLKP01 header)")
        }
        func field(_ number: Int) -> Int { Int(raw.loadUnaligned(fromByteOffset: 8 + 4 * number, as: UInt32.self).littleEndian) }
        let (files, slots) = (field(0), field(1))
        let (records, slotsAt, strings, stringsLength) = (field(2), field(3), field(4), field(5))
        guard slots > 0, slots & (slots - 1) == 0, slots >= files * 2,
            records + files * Self.recordSize <= raw.count, slotsAt + slots * Self.slotSize <= raw.count,
            strings + stringsLength <= raw.count
        else { throw corrupt("its header does not fit its \(raw.count) bytes") }
        self.bytes = bytes
        fileCount = files
        slotMask = slots - 1
        recordsOffset = records
        slotsOffset = slotsAt
        stringsOffset = strings
        self.stringsLength = stringsLength
    }

    /// The record number of the file at `path` (relative, `/`-separated bytes), or nil.
    @inline(__always)
    package func find(_ path: UnsafeRawBufferPointer) -> Int? {
        let raw = bytes.buffer
        let hash = ByteKeyTable.hash(path)
        let tag = UInt32(truncatingIfNeeded: hash >> 32)
        var slot = Int(truncatingIfNeeded: hash) & slotMask
        // At most half the slots are full, so an empty one ends every probe; the count bounds a damaged table.
        for _ in 0...slotMask {
            let at = slotsOffset + slot * Self.slotSize
            let number = Int(raw.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self).littleEndian)
            if number == 0 || number > fileCount { return nil }
            if raw.loadUnaligned(fromByteOffset: at, as: UInt32.self).littleEndian == tag {
                let record = recordsOffset + (number - 1) * Self.recordSize
                let offset = Int(raw.loadUnaligned(fromByteOffset: record + 40, as: UInt32.self).littleEndian)
                let length = Int(raw.loadUnaligned(fromByteOffset: record + 44, as: UInt32.self).littleEndian)
                if length == path.count, offset + length <= stringsLength,
                    length == 0 || memcmp(raw.baseAddress! + stringsOffset + offset, path.baseAddress!, length) == 0
                {
                    return number - 1
                }
            }
            slot = (slot + 1) & slotMask
        }
        return nil
    }

    package func record(_ number: Int) -> Record {
        let raw = bytes.buffer
        let at = recordsOffset + number * Self.recordSize
        let digest = UnsafeRawBufferPointer(rebasing: raw[at..<at + 32])
        return Record(sha256: Hex.encode(digest), size: Int64(raw.loadUnaligned(fromByteOffset: at + 32, as: UInt64.self).littleEndian))
    }

    /// The table's bytes for `files`.
    package static func encode(_ files: [PackagePath: TreeFile]) -> [UInt8] {
        encode(SortedTree(files))
    }

    /// The table's bytes for a sorted tree: records in path order, each path hashed once.
    package static func encode(_ tree: SortedTree) -> [UInt8] {
        let count = tree.entries.count
        var slots = 16
        while slots < count * 2 { slots <<= 1 }
        let records = headerSize
        let slotsAt = records + count * recordSize
        let strings = slotsAt + slots * slotSize
        let textLength = tree.entries.reduce(0) { $0 + $1.path.bytes.count }
        var out = [UInt8](repeating: 0, count: strings + textLength)
        out.withUnsafeMutableBytes { raw in
            func put(_ value: UInt32, at offset: Int) { raw.storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt32.self) }
            raw.copyBytes(from: magic)
            for (number, value) in [count, slots, records, slotsAt, strings, textLength].enumerated() {
                put(UInt32(value), at: 8 + 4 * number)
            }
            var textAt = 0
            for (number, (path, file)) in tree.entries.enumerated() {
                let at = records + number * recordSize
                // A sha256 that is not 64 hex digits (never one of ours) stays zero: it matches no content.
                _ = Hex.decode(file.sha256, into: UnsafeMutableRawBufferPointer(rebasing: raw[at..<at + 32]))
                raw.storeBytes(of: UInt64(file.size).littleEndian, toByteOffset: at + 32, as: UInt64.self)
                put(UInt32(textAt), at: at + 40)
                put(UInt32(path.bytes.count), at: at + 44)
                let hash = path.bytes.withUnsafeBytes { name in
                    if name.count > 0 { UnsafeMutableRawBufferPointer(rebasing: raw[strings + textAt..<strings + textAt + name.count]).copyMemory(from: name) }
                    return ByteKeyTable.hash(name)
                }
                textAt += path.bytes.count
                // Linear probing; at most half the slots are taken, so a free one is near.
                var slot = Int(truncatingIfNeeded: hash) & (slots - 1)
                while raw.load(fromByteOffset: slotsAt + slot * slotSize + 4, as: UInt32.self) != 0 { slot = (slot + 1) & (slots - 1) }
                put(UInt32(truncatingIfNeeded: hash >> 32), at: slotsAt + slot * slotSize)
                put(UInt32(number + 1), at: slotsAt + slot * slotSize + 4)
            }
        }
        return out
    }
}

/// Read-only bytes: a shared, read-only memory map of a file, or a copy held in memory.
private final class MappedBytes: Sendable {
    nonisolated(unsafe) let buffer: UnsafeRawBufferPointer
    private let mapped: Bool

    init(mapping path: String) throws {
        let fd = try FileDescriptor.open(path, O_RDONLY)
        buffer = try fd.closeAfter { fd in
            var info = stat()
            guard fstat(fd.rawValue, &info) == 0 else { throw OfflinePkgError.io(path: path, operation: "fstat", Errno.current) }
            let size = Int(info.st_size)
            // An empty mapping is not allowed; an empty file is refused by the header check.
            guard size > 0 else { return UnsafeRawBufferPointer(start: nil, count: 0) }
            let address = mmap(nil, size, PROT_READ, MAP_SHARED, fd.rawValue, 0)
            guard let address, address != MAP_FAILED else { throw OfflinePkgError.io(path: path, operation: "mmap", Errno.current) }
            return UnsafeRawBufferPointer(start: address, count: size)
        }
        mapped = true
    }

    init(copying bytes: [UInt8]) {
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 8)
        copy.copyBytes(from: bytes)
        buffer = UnsafeRawBufferPointer(rebasing: copy[0..<bytes.count])
        mapped = false
    }

    deinit {
        guard let base = buffer.baseAddress else { return }
        if mapped { munmap(UnsafeMutableRawPointer(mutating: base), buffer.count) } else { base.deallocate() }
    }
}
