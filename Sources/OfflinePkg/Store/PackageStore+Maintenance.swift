import Foundation

/// What `status` shows: the active set, the one before it, recent history and the last check.
public struct StoreStatus: Sendable, Codable {
    public var root: String
    public var active: ActiveSet
    public var previous: ActiveSet?
    /// The last activations, oldest first (at most `Updater.Options.historyLimit`).
    public var history: [HistoryEntry]
    /// Why some or all of the history could not be read; nil when it was read whole.
    public var historyProblem: String?
    public var manifestURL: String?
    public var lastCheck: Date?
    public var acceptedSequence: Int?
    public var heldBack: [SyncReport.HeldBack]
    public var reverted: [String: String]
    public var deviceID: String?
    /// Monitoring (SPEC §12): the last sync that reached the network, the last that succeeded, how many
    /// failed since, and the last failure.
    public var lastAttempt: Date?
    public var lastSuccess: Date?
    public var consecutiveFailures: Int = 0
    public var lastError: SyncFailure?
    /// `serve --tls`'s certificate and its pin; nil until `serve --tls` first ran on this root.
    public var tls: TLSStatus? = nil
    /// The runtime cache's entries, bytes and counters (SPEC §11).
    public var runtime: RuntimeCacheStatus? = nil
    /// What the last activating sync changed: per package how it came ("archive", "delta", "files",
    /// "cache") and the bytes it cost on the network.
    public var lastSync: [SyncReport.Change]? = nil
    /// The files held once by content (`content/`) and their bytes: what the installed trees take on disk,
    /// apart from files a tree from before the content store holds alone.
    public var content: ContentStatus? = nil
}

/// How much `content/` holds.
public struct ContentStatus: Sendable, Codable, Equatable {
    public var files: Int
    public var bytes: Int64
}

/// Where `serve --tls`'s certificate is and the pin of its key (SPEC §10).
public struct TLSStatus: Sendable, Codable, Equatable {
    /// Path of the PEM certificate (WebKitGTK's `allow_tls_certificate_for_host`, an Android network
    /// security config).
    public var certificate: String
    /// Base64 SHA-256 of the key's SubjectPublicKeyInfo: Chromium's `--ignore-certificate-errors-spki-list`.
    public var spkiSHA256: String
}

/// A file of an active tree that no longer matches what was installed (or, with `packageID`
/// `TreeDamage.runtimeCache`, a broken runtime-cache entry).
public struct TreeDamage: Sendable, Codable, Equatable {
    public static let runtimeCache = "(runtime cache)"
    /// The `packageID` of a damaged file of `content/` (its `path`); each active tree path linking it is
    /// reported under its own package too.
    public static let contentStore = "(content store)"

    public var packageID: String
    public var version: String
    public var path: String
    public var problem: String
}

extension PackageStore {
    public func status() throws -> StoreStatus {
        let record = try ActiveRecord.load(layout)
        let state = try StoreState.load(layout)
        let deviceID = (try? FileSystem.read(layout.deviceID, limit: 1024)).map {
            String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let history = History.load(layout)
        var status = StoreStatus(
            root: layout.root, active: record.current, previous: record.previous, history: history.entries,
            historyProblem: history.problem,
            manifestURL: state.manifestURL, lastCheck: state.lastCheck, acceptedSequence: state.acceptedSequence,
            heldBack: state.heldBack ?? [], reverted: state.reverted ?? [:], deviceID: deviceID, lastAttempt: state.lastAttempt,
            lastSuccess: state.lastSuccess, consecutiveFailures: state.consecutiveFailures ?? 0, lastError: state.lastError,
            runtime: RuntimeStore.status(layout))
        status.lastSync = state.lastChanges
        let usage = ContentStore(layout: layout).usage()
        status.content = ContentStatus(files: usage.files, bytes: usage.bytes)
        status.tls = LoopbackCertificate.stored(layout: layout).map { TLSStatus(certificate: $0.certificatePath, spkiSHA256: $0.spkiSHA256) }
        return status
    }

    /// Switches back to the previous active set (SPEC §8 `rollback`). The release rolled back from is
    /// not installed again until the manifest offers another version of its packages.
    @discardableResult
    public func rollback(wait: Bool = false) throws -> ActiveSet {
        let lock = try RootLock(layout: layout, wait: wait)
        defer { withExtendedLifetime(lock) {} }
        let record = try ActiveRecord.load(layout)
        guard let previous = record.previous, record.current.generation > 0 else {
            throw OfflinePkgError.unavailable("no previous active set to roll back to in \(layout.root)")
        }
        var state = try StoreState.load(layout)
        var reverted = state.reverted ?? [:]
        for package in record.current.packages where previous.package(package.id)?.version != package.version {
            reverted[package.id] = package.version
        }
        var restored = previous
        restored.generation = record.current.generation + 1
        restored.activatedAt = Date()
        // The hold-back lands before the switch: if the switch then fails, a sync merely keeps what is
        // active; the other order could switch back and lose the hold-back, reinstalling the bad release.
        state.reverted = reverted
        try state.save(layout)
        try ActiveRecord(current: restored, previous: record.current).save(layout)
        History.record(restored, in: layout)
        activated()
        return restored
    }

    /// Removes trees no set needs (see `GarbageCollector`); returns the trees removed.
    @discardableResult
    public func collectGarbage(wait: Bool = false) throws -> [String] {
        let lock = try RootLock(layout: layout, wait: wait)
        defer { withExtendedLifetime(lock) {} }
        for name in FileSystem.contents(of: layout.staging) { try FileSystem.removeTree(layout.stagingDirectory(name)) }
        StrayTemporaries.remove(in: layout)
        let runtimeGarbage = RuntimeStore.garbage(in: layout)
        for path in runtimeGarbage { FileSystem.removeFile(path) }
        return try GarbageCollector(layout: layout).collect().removedTrees + runtimeGarbage
    }

    /// Re-hashes every file of the active trees against what was installed; returns what differs.
    public func verify() throws -> [TreeDamage] {
        var damage = [TreeDamage]()
        var content = ContentCheck(store: ContentStore(layout: layout))
        for package in try ActiveRecord.load(layout).current.packages {
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            let indexPath = layout.treeIndex(id: package.id, version: package.version, treeHash: package.tree)
            func report(_ path: String, _ problem: String) {
                damage.append(TreeDamage(packageID: package.id, version: package.version, path: path, problem: problem))
            }
            let files: [PackagePath: TreeFile]
            do {
                files = try TreeIndexFile.decode(FileSystem.read(indexPath, limit: 1 << 30), path: indexPath)
            } catch {
                report("", "the tree index is unreadable: \(error)")
                continue
            }
            if TreeHash.compute(files) != package.tree { report("", "the tree index does not match the tree hash") }
            let lookupPath = layout.treeLookup(id: package.id, version: package.version, treeHash: package.tree)
            if let problem = Self.lookupTableProblem(lookupPath, files: files) { report("", problem) }
            var onDisk = Set<PackagePath>()
            TreeWalker.regularFiles(in: tree) { onDisk.insert($0) }
            for path in TreeHash.sortedPaths(files) {
                guard onDisk.contains(path) else {
                    report(path.string, "missing")
                    continue
                }
                let expected = files[path]!.sha256
                // A link to held content is checked through it, once for all the trees sharing it.
                if let held = try content.check(tree + "/" + path.string, sha256: expected) {
                    if let actual = held.actual { report(path.string, "its content \(held.path) has sha256 \(actual), expected \(expected)") }
                    continue
                }
                let actual = try FileHasher.sha256(ofFile: tree + "/" + path.string)
                if actual != expected { report(path.string, "sha256 \(actual), expected \(expected)") }
            }
            for path in onDisk.subtracting(files.keys).sorted() { report(path.description, "not part of the package") }
        }
        for item in try content.remainingDamage(layout: layout) {
            damage.append(TreeDamage(packageID: TreeDamage.contentStore, version: "", path: item.path, problem: item.problem))
        }
        for item in RuntimeStore.verify(layout) {
            damage.append(TreeDamage(packageID: TreeDamage.runtimeCache, version: "", path: item.path, problem: item.problem))
        }
        return damage
    }

    /// Why the lookup table at `path` does not answer exactly `files`, or nil. A tree installed before
    /// tables were written has none, and answers from its index: that is no damage.
    private static func lookupTableProblem(_ path: String, files: [PackagePath: TreeFile]) -> String? {
        guard FileSystem.exists(path) else { return nil }
        let table: TreeLookupTable
        do { table = try TreeLookupTable(contentsOf: path) } catch { return "the lookup table is unreadable: \(error)" }
        guard table.fileCount == files.count else {
            return "the lookup table lists \(table.fileCount) files, the index \(files.count)"
        }
        for (path, file) in files {
            let number = path.bytes.withUnsafeBytes { table.find($0) }
            guard let number, table.record(number) == .init(sha256: file.sha256, size: file.size) else {
                return "the lookup table disagrees with the index on \(path)"
            }
        }
        return nil
    }
}
