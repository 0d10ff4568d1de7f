import Foundation
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

    /// How a tree arrived, and what it cost on the network.
    package struct Outcome: Sendable {
        package var via: String
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
                return try await installDelta(entry, base: base, manifestURL: manifestURL, received: received)
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
        return Outcome(via: "archive", bytesFetched: spent + download.bytesFetched, staged: staged)
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
            let staging = layout.stagingDirectory("\(entry.id)-delta-\(UUID().uuidString)")
            try FileSystem.makeDirectories(staging)
            do {
                let tree = try applier.apply(delta: download.path, name: file.url, targetVersion: entry.version, into: staging)
                return try Self.stage(tree.files, folders: tree.folders, staged: staging, entry: entry, layout: layout)
            } catch {
                Self.contentStore(layout).discardStaging(staging)
                throw error
            }
        }
        events?(.installed(packageID: entry.id, version: entry.version))
        return Outcome(via: "delta", bytesFetched: download.bytesFetched, staged: staged)
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
            let staging = layout.stagingDirectory("\(entry.id)-\(UUID().uuidString)")
            try FileSystem.makeDirectories(staging)
            let store = Self.contentStore(layout)
            let holdsAny = defers && store.holdsAny()
            let repeats = defers ? RepeatedFiles(store: store) : nil
            let linkedHeld = HeldLinks()
            var unpacker = ArchiveUnpacker(
                limits: limits, archiveName: archiveName,
                keepFile: Self.keepFile(in: store, holdsAny: holdsAny, repeats: repeats, linkedHeld: linkedHeld))
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
                let staged = try Self.stage(
                    unpacked.files, folders: unpacked.folders, staged: staging, entry: entry, layout: layout,
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

    /// Checks a tree unpacked into `staged` against the manifest's tree hash, makes it read-only and
    /// writes its index beside it, still in staging. `folders` lists every folder under `staged`
    /// (relative paths). Nothing is visible in `trees/` until `commit` has flushed it. `pendingContent`
    /// lists the sha256s of the files not taken into content/ yet, each once, for `commit` to leave to
    /// the next operation.
    package static func stage(
        _ files: [PackagePath: TreeFile], folders: Set<PackagePath>, staged: String, entry: PackageEntry, layout: CacheLayout,
        pendingContent: [String] = []
    ) throws -> StagedTree {
        let sorted = SortedTree(files)
        let (actual, index, lookup) = Self.hashAndTables(sorted)
        guard actual == entry.tree else {
            throw OfflinePkgError.treeMismatch(package: "\(entry.id) \(entry.version)", expected: entry.tree, actual: actual)
        }
        FailPoint.afterUnpack.hit()
        // Files are born read-only (the unpacker writes them 0400; a delta's unchanged files are links
        // to an installed, read-only tree): only the folders need a chmod, and no walk of the tree. The
        // top folder is sealed last, once in place: a process that is not root cannot move a read-only
        // folder to another parent.
        try FileSystem.makeFoldersReadOnly(folders, under: staged)
        let staged = StagedTree(
            folder: staged, index: layout.index(ofTree: staged), lookup: layout.lookupTable(ofTree: staged),
            packageTrees: layout.packageTrees(entry.id),
            tree: layout.tree(id: entry.id, version: entry.version, treeHash: entry.tree),
            treeIndex: layout.treeIndex(id: entry.id, version: entry.version, treeHash: entry.tree),
            treeLookup: layout.treeLookup(id: entry.id, version: entry.version, treeHash: entry.tree),
            pendingContent: pendingContent)
        // No fsync of their own: `commit` flushes every staged tree of the sync in one syncfs.
        try FileSystem.write(index, to: staged.index)
        try FileSystem.write(lookup, to: staged.lookup, mode: 0o400)
        return staged
    }

    /// The tree hash, index and lookup table of `tree`, made side by side: at 100k files each is tens of
    /// milliseconds that one core would otherwise run one after another while the other core idles. The
    /// tables of a tree whose hash turns out wrong are thrown away.
    static func hashAndTables(_ tree: SortedTree) -> (hash: String, index: [UInt8], lookup: [UInt8]) {
        let hash = Mutex("")
        let index = Mutex([UInt8]())
        let lookup = Mutex([UInt8]())
        DispatchQueue.concurrentPerform(iterations: 3) { part in
            switch part {
            case 0:
                let value = TreeHash.compute(tree)
                hash.withLock { $0 = value }
            case 1:
                let value = TreeIndexFile.encode(tree)
                index.withLock { $0 = value }
            default:
                let value = TreeLookupTable.encode(tree)
                lookup.withLock { $0 = value }
            }
        }
        return (hash.withLock { $0 }, index.withLock { $0 }, lookup.withLock { $0 })
    }

    /// Makes staged trees installed: one `syncfs` for all of them, each index and tree renamed into
    /// `trees/`, and a second `syncfs` for the renames. A tree in `trees/` is trusted without re-hashing
    /// (a later sync only checks it exists), so its bytes must be on disk before it becomes visible;
    /// without the flush a power cut after the rename could leave zero-length files in a tree that the
    /// next sync activates. One flush per sync rather than per package (1,000 packages made 1,001 syncfs
    /// calls), and after the downloads are deleted, so their pages are dropped rather than written to
    /// the disk a second time. A tree's pending content is listed in `content/.pending/` before the
    /// tree is renamed in, so the second flush makes both durable (`ContentStore.takeInPendingTrees`).
    /// Blocks for the flushes: run it off the cooperative pool (`runBlocking`).
    package static func commit(_ trees: [StagedTree], layout: CacheLayout) throws {
        guard !trees.isEmpty else { return }
        try FileSystem.syncFileSystem(containing: layout.staging)
        for staged in trees {
            try FileSystem.makeDirectories(staged.packageTrees)
            if !staged.pendingContent.isEmpty {
                // Without its list the tree is installed all the same, its files its own copies.
                try? FileSystem.makeDirectories(layout.pendingContent)
                try? FileSystem.writeAtomically(
                    ContentStore.pendingList(staged.pendingContent), to: layout.pendingContent(ofTree: staged.tree),
                    durable: false)
            }
            // The index and lookup table land first: a tree folder that exists is always complete and
            // indexed. A reader that mapped the table it replaces keeps reading that one.
            try FileSystem.rename(staged.index, to: staged.treeIndex)
            try FileSystem.rename(staged.lookup, to: staged.treeLookup)
            if FileSystem.exists(staged.tree) {
                // A repair of a damaged tree, or a leftover from a crash between the index and the
                // rename: swap in one step, so a reader of an active tree never finds the path missing.
                // Both folders change parents, so both must be writable for the swap.
                try FileSystem.unseal(staged.tree)
                try FileSystem.exchange(staged.folder, staged.tree)
                try FileSystem.seal(staged.tree)
                try FileSystem.removeTree(staged.folder)
            } else {
                try FileSystem.rename(staged.folder, to: staged.tree)
                // A crash before this leaves a complete tree whose top folder is writable; garbage
                // collection, the last stage of every sync, seals the trees it keeps.
                FailPoint.beforeSeal.hit()
                try FileSystem.seal(staged.tree)
            }
        }
        // The renames themselves are durable before an active set can name these trees.
        try FileSystem.syncFileSystem(containing: layout.trees)
    }
}

/// A verified, read-only tree in staging with its index and lookup table beside it, and where the three
/// go in `trees/`.
package struct StagedTree: Sendable, Equatable {
    package var folder: String
    package var index: String
    package var lookup: String
    package var packageTrees: String
    package var tree: String
    package var treeIndex: String
    package var treeLookup: String
    /// The sha256s of the tree's files that are not in content/ yet: listed by `commit` for the next
    /// operation to take in.
    package var pendingContent: [String] = []
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
