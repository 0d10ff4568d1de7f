import Foundation
import Synchronization

/// The bytes of small, hot files, for hosts that answer a web view's scheme handler from memory
/// (WKURLSchemeHandler, Android's WebViewAssetLoader) instead of through the loopback server.
///
/// Keyed by file path: installed trees are immutable, so a path's bytes never change and an entry never
/// goes stale — a switch to a new set only makes old entries cold, and LRU order evicts them. Bounded
/// in bytes, like the memory tier of NSURLCache (4 MiB by default); a file larger than an eighth of the
/// capacity is read each time rather than pushing out dozens of small ones.
package final class ResourceCache: Sendable {
    package let capacity: Int
    private let state: Mutex<LRUState>

    package init(capacity: Int) {
        self.capacity = max(0, capacity)
        state = Mutex(LRUState())
    }

    /// Largest file kept.
    package var largestCachedFile: Int { capacity / 8 }

    /// The bytes of `resource`'s file, from memory when they are there.
    package func data(for resource: Resource) throws -> Data {
        if let hit = state.withLock({ $0.lookup(resource.path) }) { return hit }
        let data: Data
        do {
            // Large files are mapped rather than copied: they bypass the cache and may be big.
            data = try Data(contentsOf: resource.fileURL, options: resource.size > largestCachedFile ? .alwaysMapped : [])
        } catch {
            throw OfflinePkgError.unavailable("cannot read \(resource.path): \(error)")
        }
        guard data.count == resource.size else {
            throw OfflinePkgError.corruptState(
                path: resource.path, reason: "holds \(data.count) bytes, installed with \(resource.size)")
        }
        if data.count <= largestCachedFile && capacity > 0 {
            state.withLock { $0.insert(resource.path, data, capacity: capacity) }
        }
        return data
    }

    /// Bytes held and entries, for tests and diagnostics.
    package var usage: (bytes: Int, entries: Int) { state.withLock { ($0.bytes, $0.index.count) } }
}

/// A least-recently-used list over array slots (no per-node allocation), indexed by path.
private struct LRUState: ~Copyable {
    struct Slot {
        var path: String
        var data: Data
        var newer = -1
        var older = -1
    }

    var index: [String: Int] = [:]
    var slots: [Slot] = []
    var freeSlots: [Int] = []
    var newest = -1
    var oldest = -1
    var bytes = 0

    mutating func lookup(_ path: String) -> Data? {
        guard let slot = index[path] else { return nil }
        unlink(slot)
        pushNewest(slot)
        return slots[slot].data
    }

    mutating func insert(_ path: String, _ data: Data, capacity: Int) {
        guard index[path] == nil else { return }
        while bytes + data.count > capacity, oldest >= 0 { evict(oldest) }
        let slot: Int
        if let reused = freeSlots.popLast() {
            slot = reused
            slots[slot] = Slot(path: path, data: data)
        } else {
            slot = slots.count
            slots.append(Slot(path: path, data: data))
        }
        index[path] = slot
        bytes += data.count
        pushNewest(slot)
    }

    private mutating func evict(_ slot: Int) {
        unlink(slot)
        index[slots[slot].path] = nil
        bytes -= slots[slot].data.count
        slots[slot] = Slot(path: "", data: Data())
        freeSlots.append(slot)
    }

    private mutating func unlink(_ slot: Int) {
        let (newer, older) = (slots[slot].newer, slots[slot].older)
        if newer >= 0 { slots[newer].older = older } else { newest = older }
        if older >= 0 { slots[older].newer = newer } else { oldest = newer }
        slots[slot].newer = -1
        slots[slot].older = -1
    }

    private mutating func pushNewest(_ slot: Int) {
        slots[slot].older = newest
        slots[slot].newer = -1
        if newest >= 0 { slots[newest].newer = slot }
        newest = slot
        if oldest < 0 { oldest = slot }
    }
}
