internal import CByteLanes

/// The URL normaliser's sixteen-byte scans (`CByteLanes`), for the tests that hold them to their
/// portable form (what a build without SSE2 runs) and to a byte-by-byte reading. Not on a hot path.
package enum ByteScans {
    /// A block's masks: bit k for byte k. A host scan fills `ends` and `unusual`, a path scan the rest.
    package struct Masks: Equatable {
        package var ends: UInt32 = 0
        package var unusual: UInt32 = 0
        package var slashes: UInt32 = 0
        package var dots: UInt32 = 0
        package var percents: UInt32 = 0
    }

    /// Whether the scans the normaliser uses are the SSE2 ones in this build.
    package static var usesSSE2: Bool { cbytelanes_uses_sse2() != 0 }

    /// The host scan of sixteen bytes: its masks and the bytes it writes (ASCII letters lowered).
    package static func host(_ block: [UInt8], portable: Bool = false) -> (Masks, [UInt8]) {
        precondition(block.count == 16)
        var written = [UInt8](repeating: 0, count: 16)
        let found = portable ? cbytelanes_scan_host_portable(block, &written) : cbytelanes_scan_host(block, &written)
        return (Masks(ends: found.ends, unusual: found.unusual), written)
    }

    /// The path scan of sixteen bytes: its masks and the bytes it writes (the same bytes).
    package static func path(_ block: [UInt8], portable: Bool = false) -> (Masks, [UInt8]) {
        precondition(block.count == 16)
        var written = [UInt8](repeating: 0, count: 16)
        let found = portable ? cbytelanes_scan_path_portable(block, &written) : cbytelanes_scan_path(block, &written)
        return (Masks(ends: found.ends, slashes: found.slashes, dots: found.dots, percents: found.percents), written)
    }
}
