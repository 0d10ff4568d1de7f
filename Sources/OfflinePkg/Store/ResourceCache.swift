import FoundationEssentials
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
    private let state: Mutex<BoundedLRU<String, Data>>

    package init(capacity: Int) {
        self.capacity = max(0, capacity)
        state = Mutex(BoundedLRU(maxBytes: self.capacity))
    }

    /// Largest file kept.
    package var largestCachedFile: Int { capacity / 8 }

    /// The bytes of `resource`'s file, from memory when they are there.
    package func data(for resource: Resource) throws -> Data {
        if let hit = state.withLock({ $0.touch(resource.path) }) { return hit }
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
            state.withLock { cache in
                // Another thread may have read it meanwhile: the same bytes, keep theirs.
                if cache.peek(resource.path) == nil { cache.insert(resource.path, data, bytes: data.count) }
            }
        }
        return data
    }

    /// Bytes held and entries, for tests and diagnostics.
    package var usage: (bytes: Int, entries: Int) { state.withLock { ($0.bytes, $0.count) } }
}
