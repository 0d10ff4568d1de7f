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

    /// How a tree arrived, and what it cost on the network.
    package struct Outcome: Sendable {
        package var via: String
        package var bytesFetched: Int64
    }

    package func install(_ entry: PackageEntry, manifestURL: URL) async throws -> Outcome {
        let url = try ManifestLocation.resolve(entry.archive.url, against: manifestURL)
        events?(.downloadStarted(packageID: entry.id, version: entry.version, bytes: entry.archive.size, isDelta: false))
        let received = ProgressCounter()
        let events = self.events
        let download = try await downloader.fetch(entry.archive, from: url, name: entry.archive.url) { delta in
            let total = received.add(delta)
            events?(.downloadProgress(packageID: entry.id, received: total, total: entry.archive.size))
            FailPoint.midDownload.hit()
        }
        try await unpackAndInstall(entry, archive: download.path, archiveName: entry.archive.url)
        FileSystem.removeFile(download.path)
        events?(.installed(packageID: entry.id, version: entry.version))
        return Outcome(via: "archive", bytesFetched: download.bytesFetched)
    }

    /// Unpacks a verified archive into staging, checks the tree hash, and moves the tree into place.
    private func unpackAndInstall(_ entry: PackageEntry, archive: String, archiveName: String) async throws {
        let layout = self.layout
        let limits = self.limits
        try await runBlocking {
            let staging = layout.stagingDirectory("\(entry.id)-\(UUID().uuidString)")
            try FileSystem.makeDirectories(staging)
            do {
                let unpacked = try ArchiveUnpacker(limits: limits, archiveName: archiveName)
                    .unpack(archivePath: archive, into: staging)
                try Self.place(unpacked.files, staged: staging, entry: entry, layout: layout)
            } catch {
                try? FileSystem.removeTree(staging)
                throw error
            }
        }
    }

    /// Checks a staged tree against the manifest's tree hash and renames it into `trees/`.
    package static func place(_ files: [String: TreeFile], staged: String, entry: PackageEntry, layout: CacheLayout) throws {
        let actual = TreeHash.compute(files)
        guard actual == entry.tree else {
            throw OfflinePkgError.treeMismatch(package: "\(entry.id) \(entry.version)", expected: entry.tree, actual: actual)
        }
        FailPoint.afterUnpack.hit()
        try FileSystem.makeReadOnly(staged)
        let tree = layout.tree(id: entry.id, version: entry.version, treeHash: entry.tree)
        let index = layout.treeIndex(id: entry.id, version: entry.version, treeHash: entry.tree)
        try FileSystem.makeDirectories(layout.packageTrees(entry.id))
        // The index lands first: a tree folder that exists is always complete and indexed.
        try FileSystem.writeAtomically(TreeIndexFile.encode(files), to: index)
        if FileSystem.exists(tree) {
            // A repair of a damaged tree, or a leftover from a crash between the index and the rename:
            // swap in one step, so a reader of an active tree never finds the path missing.
            try FileSystem.exchange(staged, tree)
            try FileSystem.removeTree(staged)
        } else {
            try FileSystem.rename(staged, to: tree)
        }
    }
}

/// A running byte count shared by a transfer's callbacks.
package final class ProgressCounter: Sendable {
    private let value = Atomic<Int64>(0)
    package init() {}
    package func add(_ delta: Int64) -> Int64 { value.add(delta, ordering: .relaxed).newValue }
}
