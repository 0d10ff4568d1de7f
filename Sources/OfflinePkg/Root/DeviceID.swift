import FoundationEssentials

/// A cache root's device ID: a random UUID made once and kept in `device-id`, for rollout buckets
/// (docs/protocol.md#who-takes-a-release) and install reports (docs/protocol.md#install-reports).
package enum DeviceID {
    /// The root's ID, made (and written) when it has none yet.
    package static func of(_ layout: CacheLayout) throws -> String {
        if let existing = existing(layout) { return existing }
        let id = UUID().uuidString.lowercased()
        try FileSystem.writeAtomically(Array((id + "\n").utf8), to: layout.deviceID)
        return id
    }

    /// The ID if the root has one already; nil rather than making one.
    package static func existing(_ layout: CacheLayout) -> String? {
        guard let bytes = try? FileSystem.read(layout.deviceID, limit: 1024) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingWhitespaceAndNewlines()
        return text.isEmpty ? nil : text
    }
}
