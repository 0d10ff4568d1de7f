import Testing

@testable import OfflinePkg

@Suite("BoundedLRU: least recently used goes first, within entries and bytes")
struct BoundedLRUTests {
    @Test func evictsTheLeastRecentlyUsedFirst() {
        var cache = BoundedLRU<String, Int>(maxCount: 3)
        cache.insert("a", 1, bytes: 1)
        cache.insert("b", 2, bytes: 1)
        cache.insert("c", 3, bytes: 1)
        #expect(cache.touch("a") == 1)  // b is now the least recently used
        #expect(cache.peek("b") == 2)  // a peek does not change the order
        let evicted = cache.insert("d", 4, bytes: 1)
        #expect(evicted.map(\.key) == ["b"])
        #expect(cache.keysNewestFirst == ["d", "a", "c"])
        #expect(cache.insert("e", 5, bytes: 1).map(\.key) == ["c"])
        #expect(cache.count == 3 && cache.bytes == 3)
    }

    @Test func removesWhatAPredicatePicksKeepingTheRestInOrder() {
        var cache = BoundedLRU<String, Int>(maxBytes: 100)
        for (number, name) in ["old/a", "new/b", "old/c", "new/d"].enumerated() { cache.insert(name, number, bytes: 10) }
        let removed = cache.removeAll { $0.hasPrefix("old/") }
        #expect(Set(removed.map(\.key)) == ["old/a", "old/c"] && Set(removed.map(\.value)) == [0, 2])
        #expect(cache.keysNewestFirst == ["new/d", "new/b"])
        #expect(cache.count == 2 && cache.bytes == 20)
    }

    @Test func holdsTheByteBoundEvictingAsManyAsItTakes() {
        var cache = BoundedLRU<String, String>(maxBytes: 100)
        for name in ["a", "b", "c", "d"] { cache.insert(name, name, bytes: 25) }
        #expect(cache.bytes == 100 && cache.count == 4)
        let evicted = cache.insert("big", "big", bytes: 60)
        #expect(evicted.map(\.key) == ["a", "b", "c"])
        #expect(cache.bytes == 85)
        #expect(cache.keysNewestFirst == ["big", "d"])
        // An entry over the bound on its own still goes in, alone.
        #expect(cache.insert("huge", "huge", bytes: 500).map(\.key) == ["d", "big"])
        #expect(cache.count == 1 && cache.bytes == 500)
    }

    @Test func replacingAnEntryCountsItsNewSizeOnceAndReturnsTheOldValue() {
        var cache = BoundedLRU<String, Int>(maxCount: 10, maxBytes: 10)
        cache.insert("a", 1, bytes: 4)
        cache.insert("b", 2, bytes: 4)
        let removed = cache.insert("a", 10, bytes: 6)
        #expect(removed.map(\.key) == ["a"] && removed.map(\.value) == [1])
        #expect(cache.bytes == 10 && cache.count == 2)
        #expect(cache.keysNewestFirst == ["a", "b"])
        #expect(cache.remove("b") == 2)
        #expect(cache.bytes == 6 && cache.remove("b") == nil)
        #expect(cache.removeOldest()?.value == 10)
        #expect(cache.isEmpty && cache.bytes == 0)
    }

    /// 100,000 evictions from a cache of 100,000 entries. With eviction by a scan of every entry that is
    /// 10^10 steps, hours in a debug build; O(1) eviction does it in about a second. The loop stops at a
    /// budget a thousand times that, so a scan fails the test instead of hanging it (a synchronous loop
    /// does not see `timeLimit`).
    @Test func evictionStaysConstantTimeAtAHundredThousandEntries() {
        let size = 100_000
        var cache = BoundedLRU<Int, Int>(maxCount: size, maxBytes: size * 8)
        for key in 0..<size { cache.insert(key, key, bytes: 8) }
        #expect(cache.count == size && cache.bytes == size * 8)
        let clock = ContinuousClock()
        let budget = clock.now + .seconds(120)
        var evicted = 0
        var inOrder = true
        for key in size..<(2 * size) {
            if key % 1000 == 0, clock.now > budget { break }
            let removed = cache.insert(key, key, bytes: 8)
            inOrder = inOrder && removed.count == 1 && removed[0].key == key - size
            evicted += removed.count
        }
        #expect(evicted == size, "evicted \(evicted) of \(size) entries within the budget")
        #expect(inOrder)
        #expect(cache.count == size && cache.bytes == size * 8)
        #expect(cache.peek(size - 1) == nil && cache.peek(size) == size && cache.peek(2 * size - 1) == 2 * size - 1)
    }
}
