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
    /// in `commit`, beside the flush (`PendingContent`). With several packages, each file is linked as
    /// it is written, while the other packages' downloads and unpacks run: deferring all the links to
    /// the end made a 4-package cold sync 12 % slower (docs/benchmarks.md, wave 7).
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
            limits: limits, baseVersion: base.version, baseTree: base.tree, baseIndex: base.index, content: Self.contentStore(layout))
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
    /// 1 %), and the new content waits for `commit` (`PendingContent`). A store that holds nothing skips
    /// the look (a stat a file).
    private func unpackAndStage(_ entry: PackageEntry, archive: String, archiveName: String) async throws -> StagedTree {
        let (layout, limits, defers) = (self.layout, self.limits, defersNewContent)
        return try await runBlocking {
            let staging = layout.stagingDirectory("\(entry.id)-\(UUID().uuidString)")
            try FileSystem.makeDirectories(staging)
            let store = Self.contentStore(layout)
            let linked = LinkedPaths()
            let keepFile = Self.keepFile(in: store, defersNewContent: defers, linked: linked)
            do {
                let unpacked = try ArchiveUnpacker(limits: limits, archiveName: archiveName, keepFile: keepFile)
                    .unpack(archivePath: archive, into: staging)
                return try Self.stage(
                    unpacked.files, folders: unpacked.folders, staged: staging, entry: entry, layout: layout,
                    pendingContentExcept: defers ? linked.all : nil)
            } catch {
                // Only a tree that linked content can leave a name that no tree links.
                if defers && linked.all.isEmpty { try? FileSystem.removeTree(staging) } else { store.discardStaging(staging) }
                throw error
            }
        }
    }

    /// What the unpacker does with each file it wrote: every one taken into content/; with
    /// `defersNewContent`, only those whose content is held already (noted in `linked`), and none at
    /// all on a store that holds nothing.
    private static func keepFile(
        in store: ContentStore, defersNewContent: Bool, linked: LinkedPaths
    ) -> ((TreeWriter, PackagePath, TreeFile) throws -> Void)? {
        guard defersNewContent else { return store.keepFile }
        guard store.holdsAny() else { return nil }
        return { writer, path, file in
            guard store.contains(sha256: file.sha256) else { return }
            try store.insert(sha256: file.sha256, size: file.size, writtenBy: writer, at: path)
            linked.insert(path)
        }
    }

    /// Checks a tree unpacked into `staged` against the manifest's tree hash, makes it read-only and
    /// writes its index beside it, still in staging. `folders` lists every folder under `staged`
    /// (relative paths). Nothing is visible in `trees/` until `commit` has flushed it. With
    /// `pendingContentExcept` (the files linked into content/ already), the other files are not in
    /// content/ yet: `commit` takes them in, then seals the folders.
    package static func stage(
        _ files: [PackagePath: TreeFile], folders: Set<PackagePath>, staged: String, entry: PackageEntry, layout: CacheLayout,
        pendingContentExcept alreadyHeld: Set<PackagePath>? = nil
    ) throws -> StagedTree {
        let sorted = SortedTree(files)
        let (actual, index, lookup) = Self.hashAndTables(sorted)
        guard actual == entry.tree else {
            throw OfflinePkgError.treeMismatch(package: "\(entry.id) \(entry.version)", expected: entry.tree, actual: actual)
        }
        FailPoint.afterUnpack.hit()
        // Files are born read-only (the unpacker writes them 0444; a delta's unchanged files are links
        // to an installed, read-only tree): only the folders need a chmod, and no walk of the tree. The
        // top folder is sealed last, once in place: a process that is not root cannot move a read-only
        // folder to another parent.
        if alreadyHeld == nil { try FileSystem.makeFoldersReadOnly(folders, under: staged) }
        let staged = StagedTree(
            folder: staged, index: layout.index(ofTree: staged), lookup: layout.lookupTable(ofTree: staged), packageTrees: layout.packageTrees(entry.id),
            tree: layout.tree(id: entry.id, version: entry.version, treeHash: entry.tree),
            treeIndex: layout.treeIndex(id: entry.id, version: entry.version, treeHash: entry.tree),
            treeLookup: layout.treeLookup(id: entry.id, version: entry.version, treeHash: entry.tree),
            pendingContent: alreadyHeld.map { held in
                PendingContent(files: held.isEmpty ? sorted : SortedTree(sorted: sorted.entries.filter { !held.contains($0.path) }), folders: folders)
            })
        // No fsync of their own: `commit` flushes every staged tree of the sync in one syncfs.
        try FileSystem.write(index, to: staged.index)
        try FileSystem.write(lookup, to: staged.lookup, mode: 0o444)
        return staged
    }

    /// The tree hash, index and lookup table of `tree`, made side by side: at 100k files each is tens of
    /// milliseconds that one core would otherwise run one after another while the other core idles. The
    /// tables of a tree whose hash turns out wrong are thrown away.
    static func hashAndTables(_ tree: SortedTree) -> (hash: String, index: [UInt8], lookup: [UInt8]) {
        let hash = Mutex(""), index = Mutex([UInt8]()), lookup = Mutex([UInt8]())
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

    /// Makes staged trees installed: one `syncfs` for all of them (while their pending files are taken
    /// into content/, then their folders sealed), each index and tree renamed into `trees/`, and a
    /// second `syncfs` for the renames and the content names. A tree in `trees/` is trusted without
    /// re-hashing (a later sync only checks it exists), so its bytes must be on disk before it becomes
    /// visible; without the flush a power cut after the rename could leave zero-length files in a tree
    /// that the next sync activates. One flush per sync rather than per package (1,000 packages made
    /// 1,001 syncfs calls), and after the downloads are deleted, so their pages are dropped rather than
    /// written to the disk a second time.
    ///
    /// Damaged held content found while taking pending files in is reported through `events`. A tree
    /// whose files could not be taken in (a full disk) is not installed: its staging goes, and it is
    /// returned with its error; the others are installed all the same. Blocks for the flushes: run it
    /// off the cooperative pool (`runBlocking`).
    @discardableResult
    package static func commit(_ trees: [StagedTree], layout: CacheLayout, events: SyncEventHandler? = nil) throws
        -> [(tree: StagedTree, error: OfflinePkgError)]
    {
        guard !trees.isEmpty else { return [] }
        var failed = [Int: OfflinePkgError]()
        try whileFlushing(layout.staging) { failed = takeInPendingContent(of: trees, layout: layout) }
        reportDamagedContent(layout: layout, events: events)
        for number in failed.keys.sorted() {
            contentStore(layout).discardStaging(trees[number].folder)
            FileSystem.discardFile(trees[number].index)
            FileSystem.discardFile(trees[number].lookup)
        }
        for (number, staged) in trees.enumerated() where failed[number] == nil {
            if let pending = staged.pendingContent { try FileSystem.makeFoldersReadOnly(pending.folders, under: staged.folder) }
            try FileSystem.makeDirectories(staged.packageTrees)
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
        return failed.keys.sorted().map { (tree: trees[$0], error: failed[$0]!) }
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
    /// Set when the tree's files are not in content/ yet and its folders still writable (`commit`).
    package var pendingContent: PendingContent? = nil
}

/// The files of a staged tree that `commit` still has to take into content/ (`ContentStore.insert`),
/// and its folders, sealed after that.
///
/// Why not at once, as each file is written: linking a new file's inode into content/ costs about as
/// much kernel time as creating it (a directory entry each), and the unpack keeps both cores busy. The
/// flush that `commit` must wait for anyway leaves a core mostly idle while the kernel writes back, so
/// the links are made then, side by side with it. They need no flush of their own: the trees are renamed
/// into `trees/` only once that flush has ended, and the names are made durable by the second flush,
/// with the renames. A name that reached the disk before its inode's bytes did is linked, after a power
/// cut, only from staging, which the next sync clears: an orphan, never trusted (`ContentStore`). An
/// archive install that fails before `commit` leaves no new held name behind. (Files whose content is
/// held already are linked as they are written: `unpackAndStage`.)
package final class PendingContent: Sendable, Equatable {
    let files: SortedTree
    let folders: Set<PackagePath>

    init(files: SortedTree, folders: Set<PackagePath>) {
        self.files = files
        self.folders = folders
    }

    package static func == (a: PendingContent, b: PendingContent) -> Bool { a === b }
}

extension PackageInstaller {
    /// Runs `body` while a `syncfs` of the file system holding `path` runs on a thread of its own, and
    /// throws the first failure of either once both are done.
    static func whileFlushing(_ path: String, _ body: () throws -> Void) throws {
        let flushed = Mutex<Result<Void, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let result = Result { try FileSystem.syncFileSystem(containing: path) }
            flushed.withLock { $0 = result }
            done.signal()
        }
        thread.stackSize = 1 << 18
        thread.start()
        let worked = Result { try body() }
        done.wait()
        try flushed.withLock { $0 }?.get()
        try worked.get()
    }

    /// Takes every pending file of `trees` into content/, in two parts a tree (each with a `TreeWriter`
    /// of its own: a writer keeps one folder chain open), side by side. Returns the trees that failed,
    /// by their number in `trees`, with the first error of each.
    static func takeInPendingContent(of trees: [StagedTree], layout: CacheLayout) -> [Int: OfflinePkgError] {
        let store = contentStore(layout)
        var parts = [(tree: Int, files: ArraySlice<(path: PackagePath, file: TreeFile)>)]()
        for (number, staged) in trees.enumerated() {
            guard let entries = staged.pendingContent?.files.entries, !entries.isEmpty else { continue }
            // Split by content folder (sha256 0-7 and 8-f), not by path: each thread links into folders
            // of its own, and never waits on the other's directory lock.
            let low = entries.filter { ($0.file.sha256.utf8.first ?? 0) < UInt8(ascii: "8") }
            let high = entries.filter { ($0.file.sha256.utf8.first ?? 0) >= UInt8(ascii: "8") }
            for half in [low, high] where !half.isEmpty { parts.append((number, half[...])) }
        }
        let work = parts
        let failures = Mutex([Int: OfflinePkgError]())
        DispatchQueue.concurrentPerform(iterations: work.count) { part in
            let (number, files) = work[part]
            do {
                let writer = try TreeWriter(root: trees[number].folder, replacesFiles: false)
                for (path, file) in files {
                    guard failures.withLock({ $0[number] == nil }) else { return }
                    try store.insert(sha256: file.sha256, size: file.size, writtenBy: writer, at: path)
                }
            } catch {
                let failure = error as? OfflinePkgError ?? .unavailable("\(trees[number].folder): \(error)")
                failures.withLock { $0[number] = $0[number] ?? failure }
            }
        }
        return failures.withLock { $0 }
    }
}

/// The paths of a tree being unpacked that its lanes linked into content/ as they wrote them.
final class LinkedPaths: Sendable {
    private let paths = Mutex(Set<PackagePath>())
    func insert(_ path: PackagePath) { paths.withLock { _ = $0.insert(path) } }
    var all: Set<PackagePath> { paths.withLock { $0 } }
}

/// A running byte count shared by a transfer's callbacks.
package final class ProgressCounter: Sendable {
    private let value = Atomic<Int64>(0)
    package init() {}
    package func add(_ delta: Int64) -> Int64 { value.add(delta, ordering: .relaxed).newValue }
    package var total: Int64 { value.load(ordering: .relaxed) }
}
