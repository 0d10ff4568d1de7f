#if canImport(Glibc)
import Glibc
#endif

/// An immutable hash table from byte strings to small integers, built once per active set and then
/// only read. A lookup hashes the caller's bytes where they lie and compares them with `memcmp`
/// against one contiguous arena of keys: no `String`, no allocation, no reference counting per probe —
/// which `[String: Resource]` cannot offer for a key that lives in a stack buffer.
///
/// Open addressing with linear probing at a load factor of at most one half; each slot keeps 32 bits
/// of the hash so most mismatches never touch the arena.
package struct ByteKeyTable: Sendable {
    private struct Slot {
        var hash: UInt32
        var length: UInt32
        var offset: UInt32
        /// The value; `Int32.min` marks an empty slot.
        var value: Int32
    }

    private let arena: [UInt8]
    private let slots: [Slot]
    private let mask: Int
    package let count: Int

    /// Builds the table; for a key given twice, the last value wins.
    package init(_ entries: some Sequence<(key: [UInt8], value: Int32)>) {
        var unique = [[UInt8]: Int32]()
        for entry in entries { unique[entry.key] = entry.value }
        var capacity = 16
        while capacity < unique.count * 2 { capacity <<= 1 }
        var arena = [UInt8]()
        arena.reserveCapacity(unique.reduce(0) { $0 + $1.key.count })
        var slots = [Slot](repeating: Slot(hash: 0, length: 0, offset: 0, value: .min), count: capacity)
        for (key, value) in unique {
            precondition(value != .min && arena.count + key.count <= UInt32.max, "lookup table too large")
            let hash = key.withUnsafeBytes { Self.hash($0) }
            var index = Int(truncatingIfNeeded: hash) & (capacity - 1)
            while slots[index].value != .min { index = (index + 1) & (capacity - 1) }
            slots[index] = Slot(
                hash: UInt32(truncatingIfNeeded: hash >> 32), length: UInt32(key.count), offset: UInt32(arena.count), value: value
            )
            arena.append(contentsOf: key)
        }
        self.arena = arena
        self.slots = slots
        self.mask = capacity - 1
        self.count = unique.count
    }

    /// The value stored for `key`, or nil.
    @inline(__always)
    package func value(for key: UnsafeRawBufferPointer) -> Int32? {
        let hash = Self.hash(key)
        let tag = UInt32(truncatingIfNeeded: hash >> 32)
        var index = Int(truncatingIfNeeded: hash) & mask
        return slots.withUnsafeBufferPointer { slots in
            arena.withUnsafeBytes { arena in
                while true {
                    let slot = slots[index]
                    if slot.value == .min { return nil }
                    if slot.hash == tag && Int(slot.length) == key.count
                        && (key.count == 0 || memcmp(arena.baseAddress! + Int(slot.offset), key.baseAddress!, key.count) == 0)
                    {
                        return slot.value
                    }
                    index = (index + 1) & mask
                }
            }
        }
    }

    /// A wyhash-style hash: eight bytes per multiply, the 128-bit product folded. Keys are URL paths of
    /// 20–100 bytes, where this is a few nanoseconds against FNV-1a's one multiply per byte. Words are
    /// read little-endian on every machine: `<tree>.lookup` files hold these values.
    @inline(__always)
    package static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15
        @inline(__always) func mix(_ value: UInt64, _ with: UInt64) -> UInt64 {
            let product = (value ^ with).multipliedFullWidth(by: multiplier ^ 0xA076_1D64_78BD_642F)
            return product.high ^ product.low
        }
        var state = multiplier ^ UInt64(bytes.count)
        guard let base = bytes.baseAddress else { return mix(state, 0) }
        var offset = 0
        while offset + 8 <= bytes.count {
            state = mix(state, UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            offset += 8
        }
        if offset < bytes.count {
            // The last 1...7 bytes as a little-endian number. A key of eight bytes or more has them in
            // the word that ends where it does (one load, the bytes before shifted out). Tables on disk
            // hold these hashes: both ways give the value the bytes one by one would.
            let tail =
                bytes.count >= 8
                ? UInt64(littleEndian: base.loadUnaligned(fromByteOffset: bytes.count - 8, as: UInt64.self))
                    >> UInt64(8 * (8 - (bytes.count - offset)))
                : shortKey(bytes)
            state = mix(state, tail)
        }
        return mix(state, multiplier)
    }

    /// A key of fewer than eight bytes as a little-endian number. Out of line: `hash` is inlined at
    /// every probe, and a loop there left the callers too large for the optimiser to inline `find`.
    @inline(never)
    private static func shortKey(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var value: UInt64 = 0
        for (index, byte) in bytes.enumerated() { value |= UInt64(byte) << UInt64(8 * index) }
        return value
    }
}
