import Foundation

// Fuzz target for manifest parsing: any input either parses into a manifest that keeps every rule of
// docs/protocol.md#the-manifest, or is refused with an OfflinePkgError — never a crash.
func fuzzManifest(_ bytes: [UInt8]) {
    fuzzRoute(String(decoding: bytes.prefix(512), as: UTF8.self))
    guard let manifest = try? Manifest(parsing: bytes, source: "fuzz") else { return }
    precondition(manifest.sequence >= 1, "accepted a sequence below 1")
    var ids = Set<String>()
    for package in manifest.packages {
        precondition(ManifestRules.isValidID(package.id) && ids.insert(package.id).inserted, "bad or duplicate id")
        precondition(ManifestRules.isValidVersion(package.version), "bad version")
        precondition(!package.routes.isEmpty && package.routes.allSatisfy { $0.hasSuffix("/") && RouteKey.normalized($0) != nil })
        precondition(package.routes.allSatisfy { RouteSyntax.problem(with: $0) == nil }, "accepted a route no browser sends")
        let urls = [package.archive.url] + package.deltas.map(\.file.url)
        precondition(!urls.contains { $0.unicodeScalars.contains { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) } }, "control in a URL")
        precondition(Hex.isLowercase(package.tree, count: 64) && Hex.isLowercase(package.archive.sha256, count: 64))
        precondition(ArchivePath.validate(package.entry) == nil, "entry escapes the package")
    }
}

// The same bytes as a route: a route accepted has a lookup key, and the form a refusal suggests is
// itself accepted (the rule set is idempotent), so following a message never leads to another refusal.
private func fuzzRoute(_ route: String) {
    guard let problem = RouteSyntax.problem(with: route) else {
        precondition(RouteKey.normalized(route) != nil, "accepted a route without a lookup key")
        return
    }
    let marker = " write \""
    guard let range = problem.range(of: marker, options: .backwards), problem.hasSuffix("\"") else { return }
    let suggestion = String(problem[range.upperBound...].dropLast())
    // Suggestions are quoted with escapes; only those without an escape can be read back as they are.
    guard !suggestion.contains("\\") else { return }
    precondition(RouteSyntax.problem(with: suggestion) == nil, "suggested a route that is refused: \(suggestion)")
}
