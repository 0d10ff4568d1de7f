#if canImport(Glibc)
import Glibc
#endif

/// The member names of a zip file as its local headers hold them, in the order libarchive's seeking
/// reader visits them (ascending local-header offset, one member per offset). libarchive cannot give
/// these bytes itself: a name flagged UTF-8 is normalised to NFC (or dropped when it does not convert),
/// and every name is cut at its first NUL. The unpacker takes the name from here and checks it as bytes.
package enum ZipNames {
    /// Reads the central directory of the zip at `path`; nil when it cannot be read the simple way
    /// (no end record, offsets outside the file): the unpacker then refuses the archive.
    package static func read(_ path: String) throws -> [[UInt8]]? {
        let fd = try FileDescriptor.open(path, O_RDONLY)
        return try fd.closeAfter { fd in
            var info = stat()
            guard fstat(fd.rawValue, &info) == 0 else { throw OfflinePkgError.io(path: path, operation: "fstat", Errno.current) }
            let file = ZipFile(fd: fd.rawValue, size: Int64(info.st_size))
            // The whole central directory in one read, then one read per local header (its fixed part and
            // the name the central directory announces, read again when the local name is longer).
            guard let directory = file.centralDirectory(), let records = file.bytes(at: directory.offset, count: directory.size)
            else { return nil }
            var members = [(offset: Int64, nameLength: Int)]()
            var at = 0
            for _ in 0..<directory.count {
                guard at + 46 <= records.count, records.le32(at) == 0x0201_4b50 else { return nil }
                let header = Array(records[at..<at + 46])
                let nameLength = Int(header.le16(28)), extraLength = Int(header.le16(30))
                var offset = Int64(header.le32(42))
                if offset == 0xffff_ffff {
                    let extraAt = at + 46 + nameLength
                    guard extraAt + extraLength <= records.count,
                        let wide = zip64Offset(Array(records[extraAt..<extraAt + extraLength]), header: header)
                    else { return nil }
                    offset = wide
                }
                members.append((offset, nameLength))
                at += 46 + nameLength + extraLength + Int(header.le16(32))
            }
            var names = [[UInt8]]()
            var seen = Set<Int64>()
            for member in members.sorted(by: { $0.offset < $1.offset }) where seen.insert(member.offset).inserted {
                guard var local = file.bytes(at: member.offset, count: 30 + member.nameLength) ?? file.bytes(at: member.offset, count: 30),
                    local.le32(0) == 0x0403_4b50
                else { return nil }
                let nameLength = Int(local.le16(26))
                if local.count < 30 + nameLength {
                    guard let longer = file.bytes(at: member.offset, count: 30 + nameLength) else { return nil }
                    local = longer
                }
                names.append(Array(local[30..<30 + nameLength]))
            }
            return names
        }
    }

    /// The local-header offset from a zip64 extended-information field (id 1), whose fields appear
    /// only for the central-directory values that are all ones: sizes first, then the offset.
    private static func zip64Offset(_ extra: [UInt8], header: [UInt8]) -> Int64? {
        var at = 0
        while at + 4 <= extra.count {
            let id = extra.le16(at), length = Int(extra.le16(at + 2))
            if id == 1 {
                var field = at + 4
                if header.le32(24) == 0xffff_ffff { field += 8 }
                if header.le32(20) == 0xffff_ffff { field += 8 }
                guard field + 8 <= at + 4 + length, field + 8 <= extra.count else { return nil }
                return Int64(bitPattern: UInt64(extra.le32(field)) | UInt64(extra.le32(field + 4)) << 32)
            }
            at += 4 + length
        }
        return nil
    }
}

private struct ZipFile {
    var fd: Int32
    var size: Int64

    func bytes(at offset: Int64, count: Int) -> [UInt8]? {
        guard offset >= 0, count >= 0, offset + Int64(count) <= size else { return nil }
        var buffer = [UInt8](repeating: 0, count: count)
        let read = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
        return read == count ? buffer : nil
    }

    /// Where the central directory starts, its size and how many records it holds, from the end
    /// record (and its zip64 form when the plain one says "see zip64").
    func centralDirectory() -> (offset: Int64, size: Int, count: Int)? {
        let tailLength = Int(min(size, 22 + 0xffff))
        guard let tail = bytes(at: size - Int64(tailLength), count: tailLength) else { return nil }
        var end = tailLength - 22
        while end >= 0 && tail.le32(end) != 0x0605_4b50 { end -= 1 }
        guard end >= 0 else { return nil }
        let count = Int(tail.le16(end + 10)), length = Int(tail.le32(end + 12)), offset = Int64(tail.le32(end + 16))
        if count != 0xffff && length != 0xffff_ffff && offset != 0xffff_ffff { return (offset, length, count) }
        let locatorAt = size - Int64(tailLength - end) - 20
        guard let locator = bytes(at: locatorAt, count: 20), locator.le32(0) == 0x0706_4b50 else { return nil }
        let recordAt = Int64(bitPattern: UInt64(locator.le32(8)) | UInt64(locator.le32(12)) << 32)
        guard let record = bytes(at: recordAt, count: 56), record.le32(0) == 0x0606_4b50 else { return nil }
        let wideCount = UInt64(record.le32(32)) | UInt64(record.le32(36)) << 32
        let wideSize = UInt64(record.le32(40)) | UInt64(record.le32(44)) << 32
        let wideOffset = UInt64(record.le32(48)) | UInt64(record.le32(52)) << 32
        guard wideCount < 1 << 31, wideSize <= UInt64(size), wideOffset < 1 << 62 else { return nil }
        return (Int64(wideOffset), Int(wideSize), Int(wideCount))
    }
}

extension [UInt8] {
    fileprivate func le16(_ at: Int) -> UInt16 { UInt16(self[at]) | UInt16(self[at + 1]) << 8 }
    fileprivate func le32(_ at: Int) -> UInt32 { UInt32(le16(at)) | UInt32(le16(at + 2)) << 16 }
}
