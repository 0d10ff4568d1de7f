import Foundation

/// The rollout bucket of docs/protocol.md#who-takes-a-release: the first 4 bytes of sha256("<device>:<id>:<version>"), big-endian,
/// mod 100.
public enum Rollout {
    public static func bucket(deviceID: String, packageID: String, version: String) -> Int {
        let digest = SHA256.hash(Array("\(deviceID):\(packageID):\(version)".utf8)).bytes
        let value = UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
        return Int(value % 100)
    }

    /// The device ID of a cache root: a random UUID made once and kept in `device-id`.
    package static func deviceID(_ layout: CacheLayout) throws -> String {
        if let existing = existingDeviceID(layout) { return existing }
        let id = UUID().uuidString.lowercased()
        try FileSystem.writeAtomically(Array((id + "\n").utf8), to: layout.deviceID)
        return id
    }

    /// The device ID if the root has one already; nil rather than making one.
    package static func existingDeviceID(_ layout: CacheLayout) -> String? {
        guard let bytes = try? FileSystem.read(layout.deviceID, limit: 1024) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }
}
