/// A least-recently-used cache bounded in entries and in bytes: every operation, eviction included, is
/// O(1) (an `LRUList` underneath), so a full cache costs the same per insert at ten entries or a million.
/// Not thread-safe: an owner keeps it under its lock (`ResourceCache`, the server's `ResponseCache`).
package struct BoundedLRU<Key: Hashable, Value> {
    /// At most this many entries, and at most this many bytes (each entry counts the bytes it is given).
    package let maxCount: Int
    package let maxBytes: Int
    private var list = LRUList<Key, (value: Value, bytes: Int)>()
    /// The bytes of the entries held.
    package private(set) var bytes = 0

    package init(maxCount: Int = .max, maxBytes: Int = .max) {
        self.maxCount = max(0, maxCount)
        self.maxBytes = max(0, maxBytes)
    }

    package var count: Int { list.count }

    /// The value for `key`, made the most recently used.
    package mutating func touch(_ key: Key) -> Value? { list.touch(key)?.value }

    /// The value for `key`, order unchanged.
    package func peek(_ key: Key) -> Value? { list.peek(key)?.value }

    /// Holds `value` (of `bytes` bytes) as the most recently used entry for `key`, replacing what `key`
    /// held, after evicting least recently used entries until it fits both bounds. An entry larger than
    /// `maxBytes` on its own still goes in, alone: callers keep such entries out. Returns what left the
    /// cache (the replaced value first, then evictions, oldest first), for the caller to release.
    @discardableResult
    package mutating func insert(_ key: Key, _ value: Value, bytes size: Int) -> [(key: Key, value: Value)] {
        var removed = [(key: Key, value: Value)]()
        if let replaced = list.remove(key) {
            bytes -= replaced.bytes
            removed.append((key, replaced.value))
        }
        while !isEmpty, list.count + 1 > maxCount || bytes + size > maxBytes, let oldest = removeOldest() {
            removed.append(oldest)
        }
        list.set(key, (value, size))
        bytes += size
        return removed
    }

    /// Removes `key`'s entry and returns its value.
    @discardableResult
    package mutating func remove(_ key: Key) -> Value? {
        guard let entry = list.remove(key) else { return nil }
        bytes -= entry.bytes
        return entry.value
    }

    /// Removes and returns the least recently used entry.
    package mutating func removeOldest() -> (key: Key, value: Value)? {
        guard let (key, entry) = list.removeOldest() else { return nil }
        bytes -= entry.bytes
        return (key, entry.value)
    }

    package var isEmpty: Bool { list.count == 0 }

    /// Removes every entry whose key `shouldRemove` picks and returns them, for the caller to release.
    /// O(entries): for rare sweeps (a switch of the active set), not per request.
    @discardableResult
    package mutating func removeAll(where shouldRemove: (Key) -> Bool) -> [(key: Key, value: Value)] {
        var removed = [(key: Key, value: Value)]()
        for key in list.keysNewestFirst where shouldRemove(key) {
            if let value = remove(key) { removed.append((key, value)) }
        }
        return removed
    }

    /// Keys from most to least recently used (tests, diagnostics).
    package var keysNewestFirst: [Key] { list.keysNewestFirst }
}

extension BoundedLRU: Sendable where Key: Sendable, Value: Sendable {}
