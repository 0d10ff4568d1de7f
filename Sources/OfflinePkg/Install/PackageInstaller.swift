import Dispatch
import FoundationEssentials
import Synchronization

/// Brings one package version onto disk as an installed, read-only tree: download (hashed while it
/// streams), unpack into staging on the same file system, check the tree hash, then rename into
/// `trees/`. Stages run in that order so nothing unverified is ever extracted outside staging.
package struct PackageInstaller: Sendable {
    package var layout: CacheLayout
    package var downloader: Downloader
    package var limits: UnpackLimits
    package var events: SyncEventHandler?
    /// Set for a sync that installs one package: an archive's new content is then linked into content/
    /// by the root's next locked operation (`ContentStore.takeInPendingTrees`), not by this sync. With
    /// several packages, each file is linked as it is written, while the other packages' downloads and
    /// unpacks run: deferred to the end of the sync, the links would run alone after the last unpack
    /// instead of beside the others' work.
    package var defersNewContent = false
    /// How the origins of file-level updates take ranges (shared by the packages of one sync).
    package var origins: OriginRanges?
    /// The newest file-index deltas this sync fetched beside the manifest.
    package var early: EarlyRequests = .none

    /// How a tree arrived, and what it cost on the network.
    package struct Outcome: Sendable {
        package var route: InstallRoute
        package var bytesFetched: Int64
        /// The verified tree, waiting in staging for `commit`.
        package var staged: StagedTree
    }

    /// Installs `entry`. When `current` (the active set) holds a version that one of the entry's deltas
    /// starts from, and its tree is on disk, the delta is tried first; any failure of that path
    /// (download, hash, unpack, tree hash) discards its staging and falls back to the full archive in
    /// the same call. `bytesFetched` counts both then: it is what crossed the network.
    package func install(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet = .empty) async throws -> Outcome {
        defer { reportDamagedContent() }
        // File-level first when it is the cheapest way (PackageInstaller+Files); on any failure it
        // falls through to the delta or the archive, its bytes counted.
        let byFiles = await installByFiles(entry, manifestURL: manifestURL, current: current)
        if let outcome = byFiles.outcome { return outcome }
        var spent = byFiles.spent
        if let base = deltaBase(for: entry, current: current) {
            let received = ProgressCounter()
            do {
                var outcome = try await installDelta(entry, base: base, manifestURL: manifestURL, received: received)
                // A file index fetched and then not used crossed the network all the same.
                outcome.bytesFetched += spent
                return outcome
            } catch let error as OfflinePkgError {
                spent += received.total
                events?(.deltaFailed(packageID: entry.id, version: entry.version, error: error))
            }
        }
        let url = try ManifestLocation.resolve(entry.archive.url, against: manifestURL)
        events?(.downloadStarted(packageID: entry.id, version: entry.version, bytes: entry.archive.size, isDelta: false))
        let received = ProgressCounter()
        let events = self.events
        let download = try await downloader.fetch(entry.archive, from: url, name: entry.archive.url) { delta in
            let total = received.add(delta)
            events?(.downloadProgress(packageID: entry.id, received: total, total: entry.archive.size))
            FailPoint.midDownload.hit()
        }
        let staged = try await unpackAndStage(entry, archive: download.path, archiveName: entry.archive.url)
        FileSystem.discardFile(download.path)
        events?(.installed(packageID: entry.id, version: entry.version))
        return Outcome(route: .archive, bytesFetched: spent + download.bytesFetched, staged: staged)
    }

    /// The route `install` would take for `entry`, and its bytes, fetching nothing but the file index
    /// (into memory, checked, nothing written): files when that way is chosen (`estimateFiles`), else the
    /// delta when its base is on disk, else the archive. What `sync --dry-run` shows.
    func expectedRoute(_ entry: PackageEntry, manifestURL: URL, current: ActiveSet) async -> (InstallRoute, Int64) {
        if let bytes = await estimateFiles(entry, manifestURL: manifestURL, current: current) { return (.files, bytes) }
        if let base = deltaBase(for: entry, current: current) { return (.delta, base.delta.file.size) }
        return (.archive, entry.archive.size)
    }

    /// The installed version a delta of `entry` can start from: active now, offered as a delta's `from`,
    /// and with its tree and index on disk.
    struct DeltaBase {
        var delta: Delta
        var version: String
        var tree: String
        var index: String
    }

    func deltaBase(for entry: PackageEntry, current: ActiveSet) -> DeltaBase? {
        guard let installed = current.package(entry.id),
            let delta = entry.deltas.first(where: { $0.from == installed.version })
        else { return nil }
        let tree = layout.tree(id: installed.id, version: installed.version, treeHash: installed.tree)
        let index = layout.treeIndex(id: installed.id, version: installed.version, treeHash: installed.tree)
        guard FileSystem.isDirectory(tree), FileSystem.exists(index) else { return nil }
        return DeltaBase(delta: delta, version: installed.version, tree: tree, index: index)
    }

    private func installDelta(_ entry: PackageEntry, base: DeltaBase, manifestURL: URL, received: ProgressCounter) async throws
        -> Outcome
    {
        let file = base.delta.file
        let url = try ManifestLocation.resolve(file.url, against: manifestURL)
        events?(.downloadStarted(packageID: entry.id, version: entry.version, bytes: file.size, isDelta: true))
        let events = self.events
        let download = try await downloader.fetch(file, from: url, name: file.url) { delta in
            let total = received.add(delta)
            events?(.downloadProgress(packageID: entry.id, received: total, total: file.size))
            FailPoint.midDownload.hit()
        }
        defer { FileSystem.discardFile(download.path) }
        let layout = self.layout
        let applier = DeltaApplier(
            limits: limits, baseVersion: base.version, baseTree: base.tree, baseIndex: base.index,
            content: Self.contentStore(layout))
        let staged = try await runBlocking {
            let staging = try Staging(layout: layout).makeFolder("\(entry.id)-delta")
            do {
                let tree = try applier.apply(delta: download.path, name: file.url, targetVersion: entry.version, into: staging)
                return try Staging(layout: layout).stage(tree.files, folders: tree.folders, in: staging, entry: entry)
            } catch {
                Self.contentStore(layout).discardStaging(staging)
                throw error
            }
        }
        events?(.installed(packageID: entry.id, version: entry.version))
        return Outcome(route: .delta, bytesFetched: download.bytesFetched, staged: staged)
    }

    /// Where installs keep their files by content, killed at the `content-link` fail point when armed.
    static func contentStore(_ layout: CacheLayout) -> ContentStore {
        ContentStore(layout: layout, afterLink: { FailPoint.contentLink.hit() })
    }

    /// Unpacks a verified archive into staging and checks the tree hash. Each file is linked into
    /// content/ as it is written; with `defersNewContent`, only a file whose content is held already is
    /// (so its own pages are freed before any writeback: an update that changes 1 % of a tree writes
    /// 1 %), a file that repeats an earlier one of the tree is linked to it (`RepeatedFiles`), and the
    /// new content is listed for the next operation (`StagedTree.pendingContent`). A store that holds
    /// nothing skips the look (a stat a file), and there, a first install of one package, the tree's
    /// flush starts as soon as the archive has been read (`EarlyFlush`), the download deleted first.
    private func unpackAndStage(_ entry: PackageEntry, archive: String, archiveName: String) async throws -> StagedTree {
        let (layout, limits, defers) = (self.layout, self.limits, defersNewContent)
        return try await runBlocking {
            let staging = try Staging(layout: layout).makeFolder(entry.id)
            let store = Self.contentStore(layout)
            let holdsAny = defers && store.holdsAny()
            let repeats = defers ? RepeatedFiles(store: store) : nil
            let linkedHeld = HeldLinks()
            var unpacker = ArchiveUnpacker(
                limits: limits, archiveName: archiveName,
                keepFile: Self.keepFile(in: store, holdsAny: holdsAny, repeats: repeats, linkedHeld: linkedHeld),
                reuseFile: Self.reuseFile(in: store, repeats: repeats, linkedHeld: linkedHeld))
            // Only the sync's one download is on disk, and no written file will be swapped for a held copy.
            let flush = defers && !holdsAny ? EarlyFlush(of: staging) : nil
            if let flush {
                unpacker.archiveRead = {
                    FileSystem.discardFile(archive)
                    flush.start()
                }
            }
            do {
                let unpacked = try unpacker.unpack(archivePath: archive, into: staging)
                let staged = try Staging(layout: layout).stage(
                    unpacked.files, folders: unpacked.folders, in: staging, entry: entry,
                    pendingContent: repeats?.contents ?? [])
                try flush?.wait()
                return staged
            } catch {
                // The flush ends before staging goes, so nothing of this unpack outlives the call.
                try? flush?.wait()
                FileSystem.discardFile(layout.index(ofTree: staging))
                FileSystem.discardFile(layout.lookupTable(ofTree: staging))
                // Only a tree that linked content can leave a name that no tree links.
                if defers && !linkedHeld.any { try? FileSystem.removeTree(staging) } else { store.discardStaging(staging) }
                throw error
            }
        }
    }

    /// What the unpacker does with each file it wrote: every one taken into content/; with `repeats`
    /// (a sync of one package), only those whose content is held already (none is where the store
    /// holds nothing), each other one noted with `repeats`, which links a repeat to its first copy.
    private static func keepFile(
        in store: ContentStore, holdsAny: Bool, repeats: RepeatedFiles?, linkedHeld: HeldLinks
    ) -> (TreeWriter, PackagePath, TreeFile) throws -> Void {
        guard let repeats else { return store.keepFile }
        return { writer, path, file in
            if holdsAny && store.contains(sha256: file.sha256) {
                try store.insert(sha256: file.sha256, size: file.size, writtenBy: writer, at: path)
                linkedHeld.note()
            } else {
                try repeats.keep(path, file, writtenBy: writer)
            }
        }
    }
}

extension PackageInstaller {
    /// What the unpacker asks before it writes a file: a file whose bytes this sync has already hashed
    /// into content/ becomes a link to them; with `repeats` (a sync of one package), one that repeats an
    /// earlier file of the tree becomes a link to that file. Never a look at the disk for new bytes.
    fileprivate static func reuseFile(
        in store: ContentStore, repeats: RepeatedFiles?, linkedHeld: HeldLinks
    ) -> (TreeWriter, PackagePath, TreeFile) throws -> Bool {
        { writer, path, file in
            if try store.linkHeld(sha256: file.sha256, into: writer, at: path) {
                linkedHeld.note()
                FailPoint.heldLink.hit()
                return true
            }
            return try repeats?.reuse(path, file, writtenBy: writer) ?? false
        }
    }
}

/// Whether the lanes of an unpack linked any file to held content: only then can a failed install
/// leave a content name that no tree links.
final class HeldLinks: Sendable {
    private let linked = Atomic(false)
    func note() { linked.store(true, ordering: .relaxed) }
    var any: Bool { linked.load(ordering: .relaxed) }
}

/// A running byte count shared by a transfer's callbacks.
package final class ProgressCounter: Sendable {
    private let value = Atomic<Int64>(0)
    package init() {}
    package func add(_ delta: Int64) -> Int64 { value.add(delta, ordering: .relaxed).newValue }
    package var total: Int64 { value.load(ordering: .relaxed) }
}
