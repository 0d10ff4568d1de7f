import Foundation

/// `history.jsonl`: one line per activation, for `status`. Not part of the crash-safe switch: losing
/// its last line in a power cut costs a line of history, never the active set.
package enum History {
    package static func append(_ set: ActiveSet, to layout: CacheLayout) {
        var line = JSONCoding.encode(set, pretty: false)
        line.append(0x0a)
        guard let fd = try? FileDescriptor.open(layout.history, O_WRONLY | O_CREAT | O_APPEND) else { return }
        try? fd.closeAfter { try $0.writeAll(line, path: layout.history) }
    }

    package static func load(_ layout: CacheLayout, limit: Int = 20) -> [ActiveSet] {
        guard let bytes = try? FileSystem.read(layout.history, limit: 64 << 20) else { return [] }
        let sets = bytes.split(separator: 0x0a).compactMap { try? JSONCoding.decoder.decode(ActiveSet.self, from: Data($0)) }
        return Array(sets.suffix(limit))
    }
}
