import Foundation

extension PackageStore {
    /// Fetches again every active package with damaged files (`verify --repair`) and swaps each repaired
    /// tree in atomically: from the stored manifest's entry, or, when the manifest no longer offers the
    /// version (after a rollback), from the archive the package was installed from, resolved against the
    /// same manifest URL and checked against the same sha256, size and tree. Returns the repaired ids.
    public func repair(_ damage: [TreeDamage], options: Updater.Options = .init()) async throws -> [String] {
        try await repair(damage, options: options, transport: CurlTransport())
    }

    package func repair(_ damage: [TreeDamage], options: Updater.Options, transport: any Transport) async throws -> [String] {
        // A broken runtime-cache entry is dropped: the next request fetches it again.
        let runtimeDamage = damage.filter { $0.packageID == TreeDamage.runtimeCache }
        for item in runtimeDamage { RuntimeStore.removeEntry(at: item.path, layout: layout) }
        let contentDamage = damage.filter { $0.packageID == TreeDamage.contentStore }
        let ids = Set(damage.map(\.packageID)).subtracting([TreeDamage.runtimeCache, TreeDamage.contentStore])
        guard !ids.isEmpty || !contentDamage.isEmpty else { return runtimeDamage.isEmpty ? [] : [TreeDamage.runtimeCache] }
        let lock = try await RootLock.acquire(layout: layout, wait: options.waitForLock)
        defer { withExtendedLifetime(lock) {} }
        // Damaged held content stops being held first, so the reinstalls below write sound copies rather
        // than link the damaged inode again; every tree still linking it is rebuilt after them.
        let content = ContentStore(layout: layout)
        let damagedContent = Set(contentDamage.map { String($0.path.split(separator: "/").last ?? "") })
        let linking = content.trees(linking: damagedContent)
        for sha256 in damagedContent { FileSystem.removeFile(content.path(sha256: sha256)) }
        var repaired = try await reinstall(ids, options: options, transport: transport)
        var relinked = false
        for tree in linking where FileSystem.exists(tree.folder) {
            // A tree the reinstalls replaced links sound content already; a tree whose damaged content no
            // reinstall brought back keeps its files (the next verify names them again).
            let stillDamaged = tree.paths.contains { path, sha256 in
                ContentStore.status(of: tree.folder + "/" + path.string).map { own in
                    ContentStore.status(of: content.path(sha256: sha256)).map { $0.st_ino != own.st_ino } ?? true
                } ?? false
            }
            guard stillDamaged, tree.paths.allSatisfy({ content.contains(sha256: $0.sha256) }) else { continue }
            try PackageInstaller.commit([content.relinkedCopy(of: tree)], layout: layout)
            relinked = true
        }
        if !contentDamage.isEmpty && (relinked || !repaired.isEmpty) { repaired.append(TreeDamage.contentStore) }
        return repaired.sorted()
    }

    /// Fetches the active packages named by `ids` again and swaps their trees in; returns their ids.
    private func reinstall(_ ids: Set<String>, options: Updater.Options, transport: any Transport) async throws -> [String] {
        guard !ids.isEmpty else { return [] }
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
            limits: self.options.unpackLimits, events: options.events)
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
        return repaired
    }
}

extension InstalledPackage {
    /// The manifest entry this package was installed from, rebuilt from what the active set records.
    fileprivate func entry(archive: RemoteFile) -> PackageEntry {
        PackageEntry(id: id, version: version, routes: routes, entry: entry, fallback: fallback, archive: archive, tree: tree)
    }
}
