import Foundation

extension PackageStore {
    /// Fetches again every active package with damaged files (`verify --repair`), from the manifest the
    /// set came from, and swaps each repaired tree in atomically. Returns the repaired package ids.
    public func repair(_ damage: [TreeDamage], options: Updater.Options = .init()) async throws -> [String] {
        try await repair(damage, options: options, transport: CurlTransport())
    }

    package func repair(_ damage: [TreeDamage], options: Updater.Options, transport: any Transport) async throws -> [String] {
        let ids = Set(damage.map(\.packageID))
        guard !ids.isEmpty else { return [] }
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
                transport: transport, layout: layout, retry: options.retry, stallTimeout: options.stallTimeout,
                caBundle: options.caBundle),
            limits: self.options.unpackLimits, events: options.events)
        var repaired = [String]()
        for package in try ActiveRecord.load(layout).current.packages where ids.contains(package.id) {
            guard
                let entry = manifest.packages.first(where: {
                    $0.id == package.id && $0.version == package.version && $0.tree == package.tree
                })
            else {
                throw OfflinePkgError.unavailable(
                    "cannot repair \(package.id) \(package.version): the stored manifest no longer offers it; run sync")
            }
            _ = try await installer.install(entry, manifestURL: manifestURL)
            repaired.append(package.id)
        }
        return repaired.sorted()
    }
}
