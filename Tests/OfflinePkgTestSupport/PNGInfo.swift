import Foundation

/// The size of a PNG file and its IHDR dimensions: enough to know Chromium wrote a real image.
public struct PNGInfo: Sendable {
    public var width: Int
    public var height: Int
    public var byteCount: Int

    public init(path: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        guard data.count > 24, Array(data.prefix(8)) == signature, String(decoding: data[12..<16], as: UTF8.self) == "IHDR" else {
            throw CocoaError(.fileReadCorruptFile)
        }
        func be32(_ offset: Int) -> Int { data[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) } }
        width = be32(16)
        height = be32(20)
        byteCount = data.count
    }
}
