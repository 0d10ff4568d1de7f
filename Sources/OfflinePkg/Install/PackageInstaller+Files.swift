import FoundationEssentials

/// The file-level way (docs/protocol.md#chunked-archives-and-file-indexes) and the choice of the cheapest way.
///
/// The rule, in bytes on the network: a package whose archive has a file index, fetched over http(s), on
/// a device holding some content, goes by files when that costs less than the cheapest other way (the
/// delta from the active version when there is one, else the full archive). The index comes as a
/// file-index delta from the active tree when the repository has one (`FileIndexDelta`: hundreds of
/// bytes where the index is megabytes), else whole. An index as large as that other way can never win,
/// so it is not fetched (the common case of a small delta for one version: a few KB against an index
/// of tens of KB); a delta is read only up to that size. Then the index or delta plus the ranges of the
/// content not held (merged, with their part headers) against that other way. When the other way still
/// wins, what was read was spent in vain; its bytes are counted. With no index, no content held, an
/// origin known to serve no ranges, or a `file:` repository (nothing to save on a local read: the
/// archive is read through the same hardened reader), the delta or archive as before. A wrong index
/// delta falls back to the full index, and any other failure of the file-level way to the delta or the
/// archive, in the same call, reported by `.indexDeltaFailed` and `.filesFailed`.
extension PackageInstaller {
    /// What the file-level way brought: the installed outcome, or nil (not chosen, or failed) with the
    /// bytes spent trying.
    struct FilesAttempt {
        var outcome: Outcome?
        var spent: Int64 = 0
    }

    /// The bytes of the cheapest way other than files, and its route.
    func cheapestOther(_ entry: PackageEntry, current: ActiveSet) -> (route: InstallRoute, bytes: Int64) {
        if let base = deltaBase(for: entry, current: current), base.delta.file.size < entry.archive.size {
            return (.delta, base.delta.file.size)
        }
        return (.archive, entry.archive.size)
    }

    /// The file index of `entry`, when the file-level way may be taken at all: the entry names one, the
    /// archive is on http(s), the origin is not known to serve no ranges, and the store holds something.
    func filesReference(_ entry: PackageEntry, manifestURL: URL) -> FileIndexReference? {
        let store = ContentStore(layout: layout)
        guard let reference = entry.archive.files,
            let archiveURL = try? ManifestLocation.resolve(entry.archive.url, against: manifestURL), !archiveURL.isFileURL,
            (origins ?? OriginRanges(layout: layout)).support(for: archiveURL) != RangeSupport.none,
            store.holdsAny() || store.hasPendingTrees
        else { return nil }
        return reference
    }

    /// The installed tree of `entry`'s package an index delta may start from: active now, another tree
    /// than the entry's, its `.index` on disk.
    func indexDeltaBase(for entry: PackageEntry, current: ActiveSet) -> FileFetcher.DeltaBase? {
        guard let installed = current.package(entry.id), installed.tree != entry.tree else { return nil }
        let path = layout.treeIndex(id: installed.id, version: installed.version, treeHash: installed.tree)
        guard let bytes = try? FileSystem.read(path, limit: FileIndex.maximumSize),
            let files = try? TreeIndexFile.decode(bytes, path: path)
        else { return nil }
        return FileFetcher.DeltaBase(tree: installed.tree, files: files)
    }

    func installByFiles(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet) async -> FilesAttempt {
        guard let reference = filesReference(entry, manifestURL: manifestURL) else { return FilesAttempt() }
        let other = cheapestOther(entry, current: current).bytes
        let fetcher = FileFetcher(layout: layout, downloader: downloader, limits: limits, origins: origins)
        var spent: Int64 = 0
        var plan: FileFetcher.Plan?
        // An origin not known yet is asked how it takes ranges beside the index fetch (no round trip of
        // its own, and no whole-file answer to cut off where it takes one range a request).
        let archiveURL = try? ManifestLocation.resolve(entry.archive.url, against: manifestURL)
        let probe = archiveURL.map { url in Task { await fetcher.probeOrigin(url, size: entry.archive.size) } }
        defer { probe?.cancel() }
        let base = indexDeltaBase(for: entry, current: current)
        // The newest delta, fetched beside the manifest, when it is the one this entry needs.
        if let base, let fetched = await early.delta(entry.id) {
            spent += fetched.spent
            plan = await fetcher.planFromEarly(entry, fetched: fetched, reference: reference, manifestURL: manifestURL, base: base)
        }
        if plan == nil, let base {
            do {
                let attempt = try await fetcher.planFromDelta(
                    entry, reference: reference, manifestURL: manifestURL, base: base, cap: other)
                spent += attempt.bytes
                plan = attempt.plan
            } catch {
                spent += error.bytes
                events?(.indexDeltaFailed(packageID: entry.id, version: entry.version, error: error.error))
            }
        }
        // A plan from a delta first; when it fails, the full index in the same sync (content the first
        // attempt took in is held by then, and not fetched twice).
        while true {
            let fromDelta = plan != nil
            let received = ProgressCounter()
            do {
                if plan == nil {
                    // An index as large as the other way can never win: it is not fetched.
                    guard spent + reference.size < other else { return FilesAttempt(spent: spent) }
                    let full = try await fetcher.plan(entry, reference: reference, manifestURL: manifestURL)
                    spent += full.indexBytes
                    plan = full
                }
                guard var chosen = plan else { return FilesAttempt(spent: spent) }
                // Over TLS the requests are streams of one HTTP/2 connection, as a rule: while the origin
                // is not known, the frames go one range a request side by side (which every origin that
                // serves ranges answers alike) rather than wait a round trip for the finding-out, which
                // runs beside them and is remembered for the next sync. In the clear (HTTP/1.1, a few
                // connections, where many requests queue) it is awaited.
                let overTLS = archiveURL?.scheme?.lowercased() == "https"
                if !overTLS { await probe?.value }
                if let archiveURL, chosen.support == nil {
                    let support = fetcher.origins.support(for: archiveURL) ?? (overTLS ? .single : nil)
                    chosen.support = support
                    chosen.ranges = fetcher.rangePlan(chosen.fetch, support: support)
                }
                // The files way as a whole (its index or delta, and the ranges) against the other way.
                guard (fromDelta ? chosen.indexBytes : reference.size) + chosen.rangeBytes < other else {
                    FileSystem.discardFile(chosen.indexPath)
                    return FilesAttempt(spent: spent)
                }
                guard let archiveURL else { return FilesAttempt(spent: spent) }
                events?(.downloadStarted(packageID: entry.id, version: entry.version, bytes: chosen.rangeBytes, isDelta: false))
                let staged = try await fetcher.install(entry, plan: chosen, archiveURL: archiveURL, received: received)
                FileSystem.discardFile(chosen.indexPath)
                events?(.installed(packageID: entry.id, version: entry.version))
                return FilesAttempt(outcome: Outcome(route: .files, bytesFetched: spent + received.total, staged: staged))
            } catch {
                spent += received.total
                let failure = error as? OfflinePkgError ?? .unavailable("file-level update failed: \(error)")
                if fromDelta {
                    events?(.indexDeltaFailed(packageID: entry.id, version: entry.version, error: failure))
                    plan = nil
                    continue
                }
                events?(.filesFailed(packageID: entry.id, version: entry.version, error: failure))
                return FilesAttempt(spent: spent)
            }
        }
    }
}

extension PackageInstaller {
    /// For `sync --dry-run`: the bytes of the file-level way (index or delta, and ranges) when it is the
    /// one a sync would choose, else nil. The index is fetched into memory (checked, nothing written).
    func estimateFiles(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet) async -> Int64? {
        guard let reference = filesReference(entry, manifestURL: manifestURL) else { return nil }
        let other = cheapestOther(entry, current: current).bytes
        let fetcher = FileFetcher(layout: layout, downloader: downloader, limits: limits, origins: origins)
        if let base = indexDeltaBase(for: entry, current: current),
            let attempt = try? await fetcher.planFromDelta(
                entry, reference: reference, manifestURL: manifestURL, base: base, cap: other, checkingHeld: false),
            let plan = attempt.plan
        {
            let bytes = attempt.bytes + plan.rangeBytes
            return bytes < other ? bytes : nil
        }
        guard reference.size < other, let url = try? ManifestLocation.resolve(reference.url, against: manifestURL),
            let compressed = try? await FileFetcher.fetchInMemory(reference, from: url, downloader: downloader),
            let archiveURL = try? ManifestLocation.resolve(entry.archive.url, against: manifestURL),
            let plan = try? fetcher.plan(
                entry, compressedIndex: compressed, reference: reference, support: fetcher.origins.support(for: archiveURL))
        else { return nil }
        let bytes = reference.size + plan.rangeBytes
        return bytes < other ? bytes : nil
    }
}
