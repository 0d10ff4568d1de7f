/// Eight bytes tested at once in a `UInt64` (SWAR: "SIMD within a register"), for the URL normaliser's
/// fast path. Portable integer arithmetic rather than SIMD types: Swift's `SIMD16<UInt8>` has no
/// movemask, and its comparisons did not compile to one `pcmpeqb` + `pmovmskb` on this toolchain.
///
/// A *lane mask* has bit 8k+7 set for each byte k that matches and no other bit; byte k is the one at
/// `offset + k` in memory (words are loaded little-endian on every platform).
package enum ByteLanes {
    @inline(__always) static var ones: UInt64 { 0x0101_0101_0101_0101 }
    @inline(__always) static var low7: UInt64 { 0x7f7f_7f7f_7f7f_7f7f }
    @inline(__always) static var high: UInt64 { 0x8080_8080_8080_8080 }

    /// The eight bytes at `offset`, byte `offset` in the low bits.
    @inline(__always)
    static func load(_ base: UnsafePointer<UInt8>, _ offset: Int) -> UInt64 {
        UInt64(littleEndian: UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self))
    }

    /// Writes `word` as eight bytes at `pointer`, byte 0 first.
    @inline(__always)
    static func store(_ word: UInt64, _ pointer: UnsafeMutablePointer<UInt8>) {
        UnsafeMutableRawPointer(pointer).storeBytes(of: word.littleEndian, as: UInt64.self)
    }

    /// Lanes of `word` equal to `byte`. Exact for every lane: the sum of two 7-bit halves never
    /// carries into the next lane (the classic `x - 0x01…` trick can flag lanes above a real match).
    @inline(__always)
    static func equal(_ word: UInt64, _ byte: UInt8) -> UInt64 {
        let difference = word ^ (ones &* UInt64(byte))
        return ~(((difference & low7) &+ low7) | difference) & high
    }

    /// Lanes of `word` holding an ASCII uppercase letter.
    @inline(__always)
    static func upper(_ word: UInt64) -> UInt64 {
        let seven = word & low7
        let atLeastA = seven &+ ones &* (0x80 - 0x41)
        let aboveZ = seven &+ ones &* (0x80 - 0x5b)
        return atLeastA & ~aboveZ & ~word & high
    }

    /// `word` with ASCII uppercase letters lowered, every other byte unchanged.
    @inline(__always)
    static func lowercased(_ word: UInt64) -> UInt64 {
        word | upper(word) >> 2
    }

    /// The index (0...7) of the first lane set in a non-zero lane mask.
    @inline(__always)
    static func firstLane(_ mask: UInt64) -> Int {
        mask.trailingZeroBitCount >> 3
    }

    /// The lanes strictly before lane `lane` (0...8).
    @inline(__always)
    static func lanes(before lane: Int) -> UInt64 {
        lane >= 8 ? ~0 : (1 << UInt64(lane * 8)) &- 1
    }
}
