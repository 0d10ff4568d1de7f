extension PackageInstaller {
    /// Damaged held content that this sync's installs found before reusing it (`ContentStore
    /// .checkedForReuse`, a delta's re-hash) and dropped, reported once each.
    func reportDamagedContent() {
        Self.reportDamagedContent(layout: layout, events: events)
    }

    static func reportDamagedContent(layout: CacheLayout, events: SyncEventHandler?) {
        for item in ContentLedger.of(layout).takeDamage() { events?(.contentDamaged(path: item.path, problem: item.problem)) }
    }
}
