/// A least-recently-used order over keys with O(1) insert, touch, remove and evict: a doubly linked
/// list threaded through an array of slots, plus a dictionary from key to slot. Slots are reused, so
/// a steady cache allocates nothing per operation.
package struct LRUList<Key: Hashable, Value> {
    fileprivate struct Node {
        var key: Key
        var value: Value
        var newer: Int
        var older: Int
    }

    private var nodes: [Node?] = []
    private var freeSlots: [Int] = []
    private var slots: [Key: Int] = [:]
    /// Most and least recently used; -1 when empty.
    private var newest = -1
    private var oldest = -1

    package init() {}

    package var count: Int { slots.count }

    /// The value for `key`, made the most recently used.
    package mutating func touch(_ key: Key) -> Value? {
        guard let slot = slots[key] else { return nil }
        unlink(slot)
        linkNewest(slot)
        return nodes[slot]!.value
    }

    /// The value for `key`, order unchanged.
    package func peek(_ key: Key) -> Value? { slots[key].map { nodes[$0]!.value } }

    /// Sets `key`'s value and makes it the most recently used; returns the value it replaced.
    @discardableResult
    package mutating func set(_ key: Key, _ value: Value) -> Value? {
        if let slot = slots[key] {
            let previous = nodes[slot]!.value
            nodes[slot]!.value = value
            unlink(slot)
            linkNewest(slot)
            return previous
        }
        let node = Node(key: key, value: value, newer: -1, older: -1)
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            nodes[slot] = node
        } else {
            slot = nodes.count
            nodes.append(node)
        }
        slots[key] = slot
        linkNewest(slot)
        return nil
    }

    /// Puts `key` at the least recently used end (entries loaded at start, oldest use first).
    package mutating func setOldest(_ key: Key, _ value: Value) {
        set(key, value)
        let slot = slots[key]!
        unlink(slot)
        nodes[slot]!.newer = oldest
        nodes[slot]!.older = -1
        if oldest >= 0 { nodes[oldest]!.older = slot } else { newest = slot }
        oldest = slot
    }

    @discardableResult
    package mutating func remove(_ key: Key) -> Value? {
        guard let slot = slots.removeValue(forKey: key) else { return nil }
        unlink(slot)
        let value = nodes[slot]!.value
        nodes[slot] = nil
        freeSlots.append(slot)
        return value
    }

    /// Removes and returns the least recently used entry.
    package mutating func removeOldest() -> (key: Key, value: Value)? {
        guard oldest >= 0, let node = nodes[oldest] else { return nil }
        remove(node.key)
        return (node.key, node.value)
    }

    /// The least recently used key whose value `matches`, order unchanged: a walk from the oldest end.
    package func oldestKey(where matches: (Value) -> Bool) -> Key? {
        var slot = oldest
        while slot >= 0 {
            let node = nodes[slot]!
            if matches(node.value) { return node.key }
            slot = node.newer
        }
        return nil
    }

    /// Keys from most to least recently used (tests, diagnostics).
    package var keysNewestFirst: [Key] {
        var keys = [Key]()
        var slot = newest
        while slot >= 0 {
            keys.append(nodes[slot]!.key)
            slot = nodes[slot]!.older
        }
        return keys
    }

    private mutating func unlink(_ slot: Int) {
        let node = nodes[slot]!
        if node.newer >= 0 { nodes[node.newer]!.older = node.older } else { newest = node.older }
        if node.older >= 0 { nodes[node.older]!.newer = node.newer } else { oldest = node.newer }
        nodes[slot]!.newer = -1
        nodes[slot]!.older = -1
    }

    private mutating func linkNewest(_ slot: Int) {
        nodes[slot]!.older = newest
        nodes[slot]!.newer = -1
        if newest >= 0 { nodes[newest]!.newer = slot } else { oldest = slot }
        newest = slot
    }
}

extension LRUList: Sendable where Key: Sendable, Value: Sendable {}

extension LRUList.Node: Sendable where Key: Sendable, Value: Sendable {}
