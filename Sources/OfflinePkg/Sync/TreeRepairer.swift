import Foundation

/// Fetches again every active package with damaged files (`verify --repair`) and swaps each repaired
/// tree in atomically: from the stored manifest's entry, or, when the manifest no longer offers the
/// version (after a rollback), from the archive the package was installed from, resolved against the
/// same manifest URL and checked against the same sha256, size and tree.
package struct TreeRepairer: Sendable {
    package var root: CacheRoot
    /// The transfer options (and unpack limits) of the refetch, as a sync's.
    package var options: Updater.Options
    package var transport: any Transport

    package init(root: CacheRoot, options: Updater.Options = .init(), transport: any Transport = CurlTransport()) {
        self.root = root
        self.options = options
        self.transport = transport
    }

    private var layout: CacheLayout { root.layout }

    /// Repairs what `CacheRoot.verify()` found; returns the repaired package ids.
    package func repair(_ damage: [TreeDamage]) async throws -> [String] {
        // A broken runtime-cache entry is dropped: the next request fetches it again.
        let runtimeDamage = damage.filter { $0.packageID == TreeDamage.runtimeCache }
        for item in runtimeDamage { RuntimeStore.removeEntry(at: item.path, layout: layout) }
        let ids = Set(damage.map(\.packageID)).subtracting([TreeDamage.runtimeCache])
        guard !ids.isEmpty else { return runtimeDamage.isEmpty ? [] : [TreeDamage.runtimeCache] }
        let lock = try await RootLock.acquire(layout: layout, wait: options.waitForLock)
        defer { withExtendedLifetime(lock) {} }
        let state = try StoreState.load(layout)
        guard let source = state.manifestURL, let manifestURL = URL(string: source) else {
            throw OfflinePkgError.unavailable("cannot repair: \(layout.root) has no manifest URL recorded (run sync first)")
        }
        let manifest = try Manifest(parsing: FileSystem.read(layout.storedManifest, limit: Manifest.maximumSize), source: source)
        let installer = PackageInstaller(
            layout: layout,
            downloader: Downloader(
                transport: transport, layout: layout, retry: options.retry, limits: options.retrievalLimits,
                caBundle: options.caBundle),
            limits: options.unpackLimits, events: options.events)
        var repaired = [String]()
        for package in try ActiveRecord.load(layout).current.packages where ids.contains(package.id) {
            let offered = manifest.packages.first {
                $0.id == package.id && $0.version == package.version && $0.tree == package.tree
            }
            guard let entry = offered ?? package.archive.map({ package.entry(archive: $0) }) else {
                throw OfflinePkgError.unavailable(
                    "cannot repair \(package.id) \(package.version): the stored manifest no longer offers it and the "
                        + "active set does not record its archive; run sync")
            }
            let outcome = try await installer.install(entry, manifestURL: manifestURL)
            try PackageInstaller.commit([outcome.staged], layout: layout)
            repaired.append(package.id)
        }
        return repaired.sorted()
    }
}

extension InstalledPackage {
    /// The manifest entry this package was installed from, rebuilt from what the active set records.
    fileprivate func entry(archive: RemoteFile) -> PackageEntry {
        PackageEntry(id: id, version: version, routes: routes, entry: entry, fallback: fallback, archive: archive, tree: tree)
    }
}
