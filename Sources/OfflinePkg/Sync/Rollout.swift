import FoundationEssentials

/// The rollout bucket of docs/protocol.md#who-takes-a-release: the first 4 bytes of sha256("<device>:<id>:<version>"), big-endian,
/// mod 100.
public enum Rollout {
    public static func bucket(deviceID: String, packageID: String, version: String) -> Int {
        let digest = SHA256.hash(Array("\(deviceID):\(packageID):\(version)".utf8)).bytes
        let value = UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
        return Int(value % 100)
    }
}
