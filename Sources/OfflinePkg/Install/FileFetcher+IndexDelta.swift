import FoundationEssentials
import Synchronization

/// The index delta (`FileIndexDelta`): a device that holds a tree of the package fetches what changed
/// in the index since that tree, not the whole index. A 100k-file site's index is megabytes; the delta
/// for a few changed files is hundreds of bytes.
extension FileFetcher {
    /// The tree a delta starts from: its hash and its files (its `.index` beside it).
    package struct DeltaBase: Sendable {
        package var tree: String
        package var files: [PackagePath: TreeFile]
    }

    /// What trying an index delta gave: a plan, or none (the origin has no such delta, or the tree it
    /// gives lacks held content that only the full index can place), and the bytes it cost.
    package struct DeltaAttempt: Sendable {
        package var plan: Plan?
        package var bytes: Int64
    }

    /// Fetches the delta from `base` into memory (at most `cap` bytes: a delta that costs as much as the
    /// way it would replace is not worth reading on), checks and applies it, and plans from it. Throws
    /// for a delta that is there but wrong; `bytes` then counts in the thrown `Failed`.
    package func planFromDelta(
        _ entry: PackageEntry, reference: FileIndexReference, manifestURL: URL, base: DeltaBase, cap: Int64,
        checkingHeld: Bool = true
    ) async throws(Failed) -> DeltaAttempt {
        let name = FileIndexDelta.url(nextTo: reference.url, fromTree: base.tree, index: reference.sha256)
        let counted = ProgressCounter()
        do {
            let url = try ManifestLocation.resolve(name, against: manifestURL)
            let archiveURL = try ManifestLocation.resolve(entry.archive.url, against: manifestURL)
            guard let compressed = try await fetchIfPresent(url, name: name, cap: cap, counted: counted) else {
                return DeltaAttempt(plan: nil, bytes: counted.total)
            }
            let fetcher = self
            let plan = try await runBlocking {
                try fetcher.plan(
                    entry, compressedDelta: compressed, name: name, reference: reference, base: base,
                    support: fetcher.origins.support(for: archiveURL), checkingHeld: checkingHeld)
            }
            guard var plan else { return DeltaAttempt(plan: nil, bytes: counted.total) }
            plan.indexBytes = counted.total
            return DeltaAttempt(plan: plan, bytes: counted.total)
        } catch {
            throw Failed(error: error as? OfflinePkgError ?? .unavailable("index delta \(name): \(error)"), bytes: counted.total)
        }
    }

    /// A plan from the newest delta fetched beside the manifest (`EarlyRequests`), when it is where
    /// the new index's folder puts the newest delta from `base`, stands for `reference`, and gives the
    /// entry's tree; nil otherwise (stale, wrong, or not there), and the delta is fetched by its name.
    package func planFromEarly(
        _ entry: PackageEntry, fetched: EarlyRequests.Fetched, reference: FileIndexReference, manifestURL: URL,
        base: DeltaBase
    ) async -> Plan? {
        guard let compressed = fetched.bytes,
            fetched.name == FileIndexDelta.newestURL(nextTo: reference.url, fromTree: base.tree),
            let archiveURL = try? ManifestLocation.resolve(entry.archive.url, against: manifestURL)
        else { return nil }
        let fetcher = self
        let plan = try? await runBlocking {
            try fetcher.plan(
                entry, compressedDelta: compressed, name: fetched.name, reference: reference, base: base,
                support: fetcher.origins.support(for: archiveURL), checkingHeld: true)
        }
        guard var plan = plan ?? nil else { return nil }
        plan.indexBytes = fetched.spent
        return plan
    }

    /// A delta that was there but could not be used, and what it cost.
    package struct Failed: Error {
        package var error: OfflinePkgError
        package var bytes: Int64
    }

    /// Plans from a delta's compressed bytes: checked against the entry (the tree it starts from, the
    /// index it stands for, the tree hash it gives). Nil when some content of the tree is neither held
    /// nor in the delta: only the full index has its range.
    func plan(
        _ entry: PackageEntry, compressedDelta: [UInt8], name: String, reference: FileIndexReference, base: DeltaBase,
        support: RangeSupport?, checkingHeld: Bool
    ) throws -> Plan? {
        let json = try FileIndex.decompress(compressedDelta, source: name, maximumSize: FileIndexDelta.maximumSize)
        let delta = try FileIndexDelta.decode(json: json, archiveSize: entry.archive.size, source: name)
        func wrong(_ field: String, _ reason: String) -> OfflinePkgError {
            .invalidFileIndex(source: name, field: field, reason: reason)
        }
        guard delta.from == base.tree else { throw wrong("from", "starts from tree \(delta.from), not \(base.tree)") }
        guard delta.index == reference.sha256 else {
            throw wrong("index", "stands for index \(delta.index), the manifest names \(reference.sha256)")
        }
        let tree = try delta.apply(to: base.files, source: name)
        var files = [PackagePath: TreeFile]()
        for file in tree { files[file.path] = TreeFile(sha256: file.sha256, size: file.size) }
        let hash = TreeHash.compute(files)
        guard hash == entry.tree else {
            throw wrong("(document)", "the tree it gives hashes to \(hash), the manifest's tree is \(entry.tree)")
        }
        // The delta's own entries first, so a content at a changed path and an unchanged one is
        // fetched by the range the delta gives.
        let unchanged = tree.filter { $0.length == 0 }
        let fetch = try missing(delta.files + unchanged, checkingHeld: checkingHeld)
        if fetch.contains(where: { $0.length == 0 }) { return nil }
        return Plan(
            tree: tree, indexPath: "", indexBytes: 0, fetch: fetch, support: support, ranges: rangePlan(fetch, support: support))
    }

    /// The body of `url` into memory, or nil for a 404 or 410 (whose page is not read); more than `cap`
    /// bytes is an error.
    func fetchIfPresent(_ url: URL, name: String, cap: Int64, counted: ProgressCounter) async throws -> [UInt8]? {
        struct Absent: Error {}
        do {
            return try await downloader.retry.run { _ -> [UInt8]? in
                let collected = Mutex<[UInt8]>([])
                let request = TransferRequest(url: url, limits: downloader.limits, caBundle: downloader.caBundle)
                _ = try await downloader.transport.get(request) { head in
                    if head.status == 404 || head.status == 410 { throw Absent() }
                    if !head.isSuccess { throw OfflinePkgError.transfer(url: url.absoluteString, failure: head.failure) }
                } onBody: { chunk in
                    _ = counted.add(Int64(chunk.count))
                    try collected.withLock {
                        guard Int64($0.count + chunk.count) <= cap else {
                            throw OfflinePkgError.sizeMismatch(what: name, reason: "more than the \(cap) bytes it could save")
                        }
                        $0 += chunk
                    }
                }
                return collected.withLock { $0 }
            }
        } catch is Absent {
            return nil
        }
    }
}
