/// Archives built byte by byte, as an attacker (or an old tool in a legacy charset) writes them: names
/// that stock bsdtar would never write, such as invalid UTF-8, a NUL inside a pax value, or a zip name
/// flagged UTF-8 that is not.
enum RawArchive {
    struct Member: Sendable {
        var name: [UInt8]
        var data: [UInt8] = Array("hi\n".utf8)
        /// pax extended-header records written before the member (`path`, `hdrcharset`, ...).
        var pax: [(key: String, value: [UInt8])] = []
        /// A GNU `L` long-name header before the member.
        var gnuLongName: [UInt8]?
        /// zip only: general-purpose flag bit 11, "the name is UTF-8".
        var utf8Flag = false
    }

    static func tar(_ members: [Member]) -> [UInt8] {
        var out = [UInt8]()
        for member in members {
            if !member.pax.isEmpty {
                let records = member.pax.flatMap { paxRecord($0.key, $0.value) }
                out += header(Array("PaxHeader/x".utf8), size: records.count, type: "x") + padded(records)
            }
            if let long = member.gnuLongName {
                out += header(Array("././@LongLink".utf8), size: long.count + 1, type: "L") + padded(long + [0])
            }
            let shortName = member.pax.isEmpty && member.gnuLongName == nil ? member.name : Array("placeholder".utf8)
            out += header(shortName, size: member.data.count, type: "0") + padded(member.data)
        }
        return out + [UInt8](repeating: 0, count: 1024)
    }

    static func zip(_ members: [Member]) -> [UInt8] {
        var out = [UInt8](), directory = [UInt8]()
        for member in members {
            let crc = crc32(member.data), offset = UInt32(out.count), flags: UInt16 = member.utf8Flag ? 0x800 : 0
            let size = UInt32(member.data.count), nameLength = UInt16(member.name.count)
            out += le32(0x0403_4b50) + le16(20) + le16(flags) + le16(0) + le16(0) + le16(0x21)
            out += le32(crc) + le32(size) + le32(size) + le16(nameLength) + le16(0) + member.name + member.data
            directory += le32(0x0201_4b50) + le16(0x0314) + le16(20) + le16(flags) + le16(0) + le16(0) + le16(0x21)
            directory += le32(crc) + le32(size) + le32(size) + le16(nameLength) + le16(0) + le16(0) + le16(0) + le16(0)
            directory += le32(0o100644 << 16) + le32(offset) + member.name
        }
        let count = UInt16(members.count)
        let end = le32(0x0605_4b50) + le16(0) + le16(0) + le16(count) + le16(count)
            + le32(UInt32(directory.count)) + le32(UInt32(out.count)) + le16(0)
        return out + directory + end
    }

    private static func header(_ name: [UInt8], size: Int, type: Character) -> [UInt8] {
        var block = [UInt8](repeating: 0, count: 512)
        func put(_ bytes: [UInt8], at offset: Int) { block.replaceSubrange(offset..<offset + bytes.count, with: bytes) }
        func octal(_ value: Int, width: Int) -> [UInt8] {
            let digits = String(value, radix: 8)
            return Array((String(repeating: "0", count: width - 1 - digits.count) + digits).utf8) + [0]
        }
        put(Array(name.prefix(100)), at: 0)
        put(octal(0o644, width: 8), at: 100)
        put(octal(0, width: 8), at: 108)
        put(octal(0, width: 8), at: 116)
        put(octal(size, width: 12), at: 124)
        put(octal(0, width: 12), at: 136)
        put([UInt8](repeating: 0x20, count: 8), at: 148)
        put([type.asciiValue!], at: 156)
        put(Array("ustar\u{0}00".utf8), at: 257)
        let sum = block.reduce(0) { $0 + Int($1) }
        put(octal(sum, width: 7) + [0x20], at: 148)
        return block
    }

    private static func paxRecord(_ key: String, _ value: [UInt8]) -> [UInt8] {
        let body = Array(" \(key)=".utf8) + value + [0x0a]
        var length = body.count + 1
        while String(length).count + body.count != length { length = String(length).count + body.count }
        return Array(String(length).utf8) + body
    }

    private static func padded(_ data: [UInt8]) -> [UInt8] {
        data + [UInt8](repeating: 0, count: (512 - data.count % 512) % 512)
    }

    private static func le16(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xff), UInt8(value >> 8)] }
    private static func le32(_ value: UInt32) -> [UInt8] { le16(UInt16(value & 0xffff)) + le16(UInt16(value >> 16)) }

    private static func crc32(_ data: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xffff_ffff
        for byte in data {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xedb8_8320 : crc >> 1 }
        }
        return ~crc
    }
}
