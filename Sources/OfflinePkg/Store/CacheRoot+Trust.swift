import FoundationEssentials

extension CacheRoot {
    /// What this root trusts, manifest URL by manifest URL (docs/protocol.md#keys-documents; `status`,
    /// `keys show --root`).
    package func trust() throws -> [TrustStatus] {
        try SyncState.load(layout).trustStatus()
    }

    /// `trust --reset`: forgets what the root trusts for `manifestURL` (every URL when nil), so that a sync
    /// of it given no keys takes an unsigned manifest again. The rollback baselines stay: they protect
    /// with or without signatures. Returns what was forgotten.
    package func forgetTrust(for manifestURL: String?, wait: Bool = false) throws -> [TrustStatus] {
        let lock = try RootLock(layout: layout, wait: wait)
        defer { withExtendedLifetime(lock) {} }
        var state = try SyncState.load(layout)
        let before = state.trustStatus()
        let forgotten = state.forgetTrust(for: manifestURL)
        if !forgotten.isEmpty { try state.save(layout) }
        return before.filter { forgotten.contains($0.manifestURL) }
    }
}
