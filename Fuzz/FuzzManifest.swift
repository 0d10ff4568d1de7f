// Fuzz target for manifest parsing: any input either parses into a manifest that keeps every SPEC §2
// invariant, or is refused with an OfflinePkgError — never a crash.
func fuzzManifest(_ bytes: [UInt8]) {
    guard let manifest = try? Manifest(parsing: bytes, source: "fuzz") else { return }
    precondition(manifest.sequence >= 1, "accepted a sequence below 1")
    var ids = Set<String>()
    for package in manifest.packages {
        precondition(PackageEntry.isValidID(package.id) && ids.insert(package.id).inserted, "bad or duplicate id")
        precondition(PackageEntry.isValidVersion(package.version), "bad version")
        precondition(!package.routes.isEmpty && package.routes.allSatisfy { $0.hasSuffix("/") && RouteKey.normalized($0) != nil })
        precondition(Hex.isLowercase(package.tree, count: 64) && Hex.isLowercase(package.archive.sha256, count: 64))
        precondition(ArchivePath.validate(package.entry) == nil, "entry escapes the package")
    }
}
