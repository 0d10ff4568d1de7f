import FoundationEssentials

/// Fetches again every active package with damaged files (`verify --repair`) and swaps each repaired
/// tree in atomically: from the stored manifest's entry, or, when the manifest no longer offers the
/// version (after a rollback), from the archive the package was installed from, resolved against the
/// same manifest URL and checked against the same sha256, size and tree.
package struct TreeRepairer: Sendable {
    package var root: CacheRoot
    /// The transfer options (and unpack limits) of the refetch, as a sync's.
    package var options: Updater.Options

    /// A repair of `root`, fetching through the root's world.
    package init(root: CacheRoot, options: Updater.Options = .init()) {
        self.root = root
        self.options = options
    }

    private var layout: CacheLayout { root.layout }

    /// Repairs what `CacheRoot.verify()` found; returns the repaired package ids.
    package func repair(_ damage: [TreeDamage]) async throws -> [String] {
        // A broken runtime-cache entry is dropped: the next request fetches it again.
        let runtimeDamage = damage.filter { $0.packageID == TreeDamage.runtimeCache }
        for item in runtimeDamage { RuntimeStore.removeEntry(at: item.path, layout: layout) }
        // A running figure that disagrees with content/ is written afresh by the walk that ends every repair.
        let contentDamage = damage.filter { $0.packageID == TreeDamage.contentStore && $0.path != layout.contentUsage }
        let figureWrong = damage.contains { $0.packageID == TreeDamage.contentStore && $0.path == layout.contentUsage }
        let ids = Set(damage.map(\.packageID)).subtracting([TreeDamage.runtimeCache, TreeDamage.contentStore])
        guard !ids.isEmpty || !contentDamage.isEmpty || figureWrong else { return runtimeDamage.isEmpty ? [] : [TreeDamage.runtimeCache] }
        let (events, root) = (options.events, layout.root)
        let lock = try await RootLock.acquire(layout: layout, wait: options.waitForLock) { events?(.waitingForLock(root: root)) }
        defer { withExtendedLifetime(lock) {} }
        // A new locked operation: held content is hashed again before it is reused.
        ContentLedger.of(layout).lockTaken()
        ContentStore(layout: layout).catchUp()
        // A repair drops and relinks held names it does not count one by one: the ledger's session is
        // open while it runs, and its close walks content/ for the figure.
        let ledger = ContentLedger.of(layout)
        try ledger.willChange()
        ledger.uncounted()
        defer { _ = try? ledger.close(removingOrphans: false, walk: true) }
        guard !ids.isEmpty || !contentDamage.isEmpty else {
            return (runtimeDamage.isEmpty ? [] : [TreeDamage.runtimeCache]) + [TreeDamage.contentStore]
        }
        // Damaged held content stops being held first, so the reinstalls below write sound copies rather
        // than link the damaged inode again; every tree still linking it is rebuilt after them.
        let content = ContentStore(layout: layout)
        let record = try ActiveRecord.load(layout)
        var damagedContent = Set(contentDamage.map { String($0.path.split(separator: "/").last ?? "") })
        // A damaged tree file that is a link to held content damages that content too, also when the
        // caller passed only the tree's entry.
        for package in record.current.packages where ids.contains(package.id) {
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            let index = layout.treeIndex(id: package.id, version: package.version, treeHash: package.tree)
            guard let files = try? TreeIndexFile.decode(FileSystem.read(index, limit: 1 << 30), path: index) else { continue }
            for item in damage where item.packageID == package.id {
                guard let sha256 = files[PackagePath(item.path)]?.sha256, let own = ContentStore.status(of: tree + "/" + item.path),
                    let held = ContentStore.status(of: content.path(sha256: sha256)), held.st_ino == own.st_ino
                else { continue }
                damagedContent.insert(sha256)
            }
        }
        let linking = content.trees(linking: damagedContent)
        for sha256 in damagedContent { FileSystem.discardFile(content.path(sha256: sha256)) }
        var repaired = try await reinstall(record.current.packages.filter { ids.contains($0.id) }, options: options)
        // Damaged content that only trees outside the active set linked comes back through the previous
        // set's package, from the manifest or the archive its record names; it may no longer be offered.
        let unrefilled = linking.filter { tree in
            FileSystem.exists(tree.folder) && !tree.paths.allSatisfy { content.contains(sha256: $0.sha256) }
        }
        for package in record.previous?.packages ?? [] where record.current.package(package.id)?.tree != package.tree {
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            guard unrefilled.contains(where: { $0.folder == tree }) else { continue }
            repaired += (try? await reinstall([package], options: options)) ?? []
        }
        var relinked = false
        for tree in linking where FileSystem.exists(tree.folder) {
            // A tree the reinstalls replaced links sound content already.
            let stillDamaged = tree.paths.contains { path, sha256 in
                ContentStore.status(of: tree.folder + "/" + path.string).map { own in
                    ContentStore.status(of: content.path(sha256: sha256)).map { $0.st_ino != own.st_ino } ?? true
                } ?? false
            }
            guard stillDamaged else { continue }
            guard tree.paths.allSatisfy({ content.contains(sha256: $0.sha256) }) else {
                // No sound copy came back: the damaged inode is held again, so verify keeps naming it.
                for (path, sha256) in tree.paths where !FileSystem.exists(content.path(sha256: sha256)) {
                    try? FileSystem.hardLink(tree.folder + "/" + path.string, to: content.path(sha256: sha256))
                }
                continue
            }
            try Staging(layout: layout).commit([content.relinkedCopy(of: tree)])
            relinked = true
        }
        if (!contentDamage.isEmpty && (relinked || !repaired.isEmpty)) || figureWrong { repaired.append(TreeDamage.contentStore) }
        return Array(Set(repaired)).sorted()
    }

    /// Fetches `packages` (installed ones) again and swaps their trees in; returns their ids.
    private func reinstall(_ packages: [InstalledPackage], options: Updater.Options) async throws -> [String] {
        guard !packages.isEmpty else { return [] }
        let state = try SyncState.load(layout)
        guard let source = state.manifestURL, let manifestURL = URL(string: source) else {
            throw OfflinePkgError.unavailable("cannot repair: \(layout.root) has no manifest URL recorded (run sync first)")
        }
        let manifest = try Manifest(parsing: FileSystem.read(layout.storedManifest, limit: Manifest.maximumSize), source: source)
        let installer = PackageInstaller(
            layout: layout,
            downloader: Downloader(
                transport: root.world.transport, layout: layout, retry: options.retry, limits: options.retrievalLimits,
                caBundle: options.caBundle),
            limits: options.unpackLimits, events: options.events)
        var repaired = [String]()
        for package in packages {
            let offered = manifest.packages.first {
                $0.id == package.id && $0.version == package.version && $0.tree == package.tree
            }
            guard let entry = offered ?? package.archive.map({ package.entry(archive: $0) }) else {
                throw OfflinePkgError.unavailable(
                    "cannot repair \(package.id) \(package.version): the stored manifest no longer offers it and the "
                        + "active set does not record its archive; run sync")
            }
            let outcome = try await installer.install(entry, manifestURL: manifestURL)
            let layout = self.layout
            try await runBlocking { try Staging(layout: layout).commit([outcome.staged]) }
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
