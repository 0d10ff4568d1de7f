import FoundationEssentials

/// The file-level way (docs/protocol.md#chunked-archives-and-file-indexes) and the choice of the cheapest way.
///
/// The rule, in bytes on the network: a package whose archive has a file index, fetched over http(s), on
/// a device holding some content, goes by files when that costs less than the cheapest other way (the
/// delta from the active version when there is one, else the full archive). First, before anything is
/// fetched: an index as large as that other way can never win, so it is not fetched (the common case of
/// a small delta for one version: a few KB against an index of tens of KB). Then, with the index: the
/// index plus the ranges of the content not held (merged, with their part headers) against that other
/// way. When the other way still wins, the index was spent in vain; its bytes are counted. With no index,
/// no content held, or a `file:` repository (nothing to save on a local read: the archive is read
/// through the same hardened reader), the delta or archive as before. Any failure of the file-level way
/// falls back to the others in the same call, reported by `.filesFailed`.
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

    /// Whether the file-level way is worth fetching the index for.
    func considersFiles(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet) -> FileIndexReference? {
        let store = ContentStore(layout: layout)
        guard let reference = entry.archive.files,
            let archiveURL = try? ManifestLocation.resolve(entry.archive.url, against: manifestURL), !archiveURL.isFileURL,
            store.holdsAny() || store.hasPendingTrees
        else { return nil }
        return reference.size < cheapestOther(entry, current: current).bytes ? reference : nil
    }

    func installByFiles(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet) async -> FilesAttempt {
        guard let reference = considersFiles(entry, manifestURL: manifestURL, current: current) else { return FilesAttempt() }
        let fetcher = FileFetcher(layout: layout, downloader: downloader, limits: limits)
        let received = ProgressCounter()
        var spent: Int64 = 0
        do {
            let plan = try await fetcher.plan(entry, reference: reference, manifestURL: manifestURL)
            spent = plan.indexBytes
            guard reference.size + plan.rangeBytes < cheapestOther(entry, current: current).bytes else {
                FileSystem.discardFile(plan.indexPath)
                return FilesAttempt(spent: spent)
            }
            let archiveURL = try ManifestLocation.resolve(entry.archive.url, against: manifestURL)
            events?(.downloadStarted(packageID: entry.id, version: entry.version, bytes: plan.rangeBytes, isDelta: false))
            let staged = try await fetcher.install(entry, plan: plan, archiveURL: archiveURL, received: received)
            FileSystem.discardFile(plan.indexPath)
            events?(.installed(packageID: entry.id, version: entry.version))
            return FilesAttempt(outcome: Outcome(route: .files, bytesFetched: spent + received.total, staged: staged))
        } catch {
            let failure = error as? OfflinePkgError ?? .unavailable("file-level update failed: \(error)")
            events?(.filesFailed(packageID: entry.id, version: entry.version, error: failure))
            return FilesAttempt(spent: spent + received.total)
        }
    }
}

extension PackageInstaller {
    /// For `sync --dry-run`: the bytes of the file-level way (index and ranges) when it is the one a
    /// sync would choose, else nil. The index is fetched into memory (checked, nothing written).
    func estimateFiles(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet) async -> Int64? {
        guard let reference = considersFiles(entry, manifestURL: manifestURL, current: current),
            let url = try? ManifestLocation.resolve(reference.url, against: manifestURL),
            let compressed = try? await FileFetcher.fetchInMemory(reference, from: url, downloader: downloader),
            let plan = try? FileFetcher(layout: layout, downloader: downloader, limits: limits)
                .plan(entry, compressedIndex: compressed, reference: reference)
        else { return nil }
        let bytes = reference.size + plan.rangeBytes
        return bytes < cheapestOther(entry, current: current).bytes ? bytes : nil
    }
}
