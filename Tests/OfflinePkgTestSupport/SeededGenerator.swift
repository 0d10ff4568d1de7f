/// SplitMix64 (Steele, Lea and Flood, 2014): a random number generator whose fixed seed gives the same
/// sequence in every process, unlike the system's. For reproducible failures (the differential tests)
/// and benchmarks that must walk the same inputs in the same order in two builds.
public struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
