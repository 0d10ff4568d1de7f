/// What a sync will write for the packages it installs, checked against the free space before anything
/// is downloaded (docs/design.md, "Free space"). An estimate that is short is not a disaster (a full disk
/// ends the sync with exit 1 and the active set unchanged), but it costs a download that cannot be used.
package enum SpaceEstimate {
    /// How many times its archive an unpacked tree is assumed to be when nothing says otherwise. Web
    /// content compresses 2-5x, but real sites reach 8.6x (mostly text: minified JS, JSON, SVG), so
    /// 10x covers them; a tree never outgrows the unpack byte limit, which caps the guess.
    package static let unknownTreeFactor: Int64 = 10
    /// Slack on a known unpacked size for what the file system adds: each file takes whole blocks.
    package static let blockSlackDivisor: Int64 = 16

    /// The download plus the tree, per entry: the tree is the manifest's `unpackedSize` (plus block
    /// slack) when it has one, else `unknownTreeFactor` times the archive; either is capped by the
    /// unpack byte limit, which the unpacker enforces.
    package static func needed(for entries: [PackageEntry], limits: UnpackLimits) -> Int64 {
        entries.reduce(Int64(0)) { total, entry in
            let archive = entry.archive.size
            let tree = entry.unpackedSize.map { add($0, $0 / blockSlackDivisor) } ?? multiply(archive, unknownTreeFactor)
            return add(total, add(archive, min(tree, limits.maxBytes)))
        }
    }

    // Sizes come from the manifest: a hostile one must not wrap the sum round to something small.
    private static func add(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    private static func multiply(_ a: Int64, _ b: Int64) -> Int64 {
        let (product, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? .max : product
    }
}
