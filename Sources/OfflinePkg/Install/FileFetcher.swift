import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A file-level update (docs/protocol.md#chunked-archives-and-file-indexes): from a package's file index, the files whose content the device does
/// not hold, their frames fetched by `Range` requests, each member decompressed through the hardened
/// reader and checked, taken into the content store, and the tree built in staging from links to held
/// and fetched content, then checked against the tree hash like any other install.
///
/// Resumable: each fetched file enters the content store as soon as it is checked, so after a crash the
/// next sync holds it (re-hashed first: held content no tree links yet is not trusted on its name).
package struct FileFetcher: Sendable {
    package var layout: CacheLayout
    package var downloader: Downloader
    package var ranges: RangeFetcher
    package var limits: UnpackLimits
    /// Requests in flight at once for one package: a few large ones where the origin answers several
    /// ranges a request; where it answers one, many small ones, which a `CurlSession` carries as HTTP/2
    /// streams of one connection or queues for a few HTTP/1.1 connections.
    package var maxInFlight = 4
    package var maxOneRangeInFlight = 16
    package var mergeGap = RangePlan.defaultMergeGap
    /// How the origins take ranges, remembered in the root.
    package var origins: OriginRanges

    package init(layout: CacheLayout, downloader: Downloader, limits: UnpackLimits, origins: OriginRanges? = nil) {
        self.layout = layout
        self.downloader = downloader
        ranges = RangeFetcher(transport: downloader.transport, limits: downloader.limits, caBundle: downloader.caBundle)
        self.limits = limits
        self.origins = origins ?? OriginRanges(layout: layout)
    }

    /// What fetching a package by files would take, once its index (or an index delta) is read.
    package struct Plan: Sendable {
        /// Every file of the new tree, sorted by path. From an index delta, only the files in `fetch`
        /// carry their ranges.
        package var tree: [FileIndex.Entry]
        /// The index's path in `downloads/` (kept until the tree is installed).
        package var indexPath: String
        /// Bytes the index download cost in this call (0 when it was already on disk).
        package var indexBytes: Int64
        /// One entry per missing content, whose frames are fetched.
        package var fetch: [FileIndex.Entry]
        /// How the archive's origin takes ranges, as the root remembers it (nil: to be found out).
        package var support: RangeSupport?
        package var ranges: RangePlan

        /// The bytes the range requests will cost: what they ask for, plus about 120 bytes of part
        /// headers a span of a multipart/byteranges answer.
        package var rangeBytes: Int64 {
            let parts = ranges.requests.reduce(0) { $0 + ($1.spans.count > 1 ? $1.spans.count : 0) }
            return ranges.bytes + Int64(parts) * 120
        }
    }

    /// Fetches (or finds) the index of `entry` and plans what to fetch.
    package func plan(_ entry: PackageEntry, reference: FileIndexReference, manifestURL: URL) async throws -> Plan {
        let url = try ManifestLocation.resolve(reference.url, against: manifestURL)
        let support = origins.support(for: try ManifestLocation.resolve(entry.archive.url, against: manifestURL))
        let file = RemoteFile(url: reference.url, sha256: reference.sha256, size: reference.size)
        let download = try await downloader.fetch(file, from: url, name: reference.url) { _ in }
        let fetcher = self
        // Held content is hashed before it is counted on (`checkedForReuse`): off the cooperative pool.
        var plan = try await runBlocking {
            try fetcher.plan(
                entry, compressedIndex: try FileSystem.read(download.path, limit: Int(reference.size)), reference: reference,
                support: support, checkingHeld: true)
        }
        plan.indexPath = download.path
        plan.indexBytes = download.bytesFetched
        return plan
    }

    /// Plans from the compressed index bytes (already checked against `reference`). `checkingHeld` (a
    /// sync, not a dry run, which writes nothing): each held file to be linked is hashed first, once per
    /// sync, and a damaged one dropped and fetched instead.
    package func plan(
        _ entry: PackageEntry, compressedIndex: [UInt8], reference: FileIndexReference, support: RangeSupport? = nil,
        checkingHeld: Bool = false
    ) throws -> Plan {
        let json = try FileIndex.decompress(compressedIndex, source: reference.url)
        let index = try FileIndex.decode(json: json, archiveSize: entry.archive.size, source: reference.url)
        let fetch = try missing(index.entries, checkingHeld: checkingHeld)
        return Plan(
            tree: index.entries, indexPath: "", indexBytes: 0, fetch: fetch, support: support,
            ranges: rangePlan(fetch, support: support))
    }

    /// The entries of `files` whose content the store does not hold, one per content.
    func missing(_ files: [FileIndex.Entry], checkingHeld: Bool) throws -> [FileIndex.Entry] {
        let store = ContentStore(layout: layout)
        // A sync takes pending content in before it plans; a dry run counts it as held instead.
        let pending = checkingHeld ? [] : store.pendingSha256s()
        var seen = Set<String>()
        var fetch = [FileIndex.Entry]()
        for file in files where !seen.contains(file.sha256) {
            seen.insert(file.sha256)
            if try !pending.contains(file.sha256) && !Self.holds(store, file, checking: checkingHeld) { fetch.append(file) }
        }
        return fetch
    }

    /// The requests for `fetch`'s frames, for an origin that takes ranges as `support` says: several a
    /// request (or not known yet: asked so first), or one a request within the waste budget.
    func rangePlan(_ fetch: [FileIndex.Entry], support: RangeSupport?) -> RangePlan {
        let wanted = fetch.map { ByteRange(offset: $0.offset, length: $0.length) }
        guard support == .single else { return RangePlan(wanted, mergeGap: mergeGap) }
        let bytes = wanted.reduce(0) { $0 + $1.length }
        return RangePlan(oneRangeARequest: wanted, wasteBudget: RangePlan.wasteBudget(forWanted: bytes))
    }

    /// The index into memory, for a plan that writes nothing (`sync --dry-run`): size and sha256 checked.
    static func fetchInMemory(_ reference: FileIndexReference, from url: URL, downloader: Downloader) async throws -> [UInt8] {
        let collected = Mutex<[UInt8]>([])
        let name = reference.url
        let request = TransferRequest(url: url, limits: downloader.limits, caBundle: downloader.caBundle)
        let head = try await downloader.transport.get(request) { _ in
        } onBody: { chunk in
            try collected.withLock {
                guard $0.count + chunk.count <= reference.size else {
                    throw OfflinePkgError.sizeMismatch(
                        what: name, reason: "more than the \(reference.size) bytes the manifest promised")
                }
                $0 += chunk
            }
        }
        if !head.isSuccess { throw OfflinePkgError.transfer(url: url.absoluteString, failure: head.failure) }
        let bytes = collected.withLock { $0 }
        let digest = SHA256.hash(bytes).hex
        guard digest == reference.sha256 else {
            throw OfflinePkgError.hashMismatch(what: name, expected: reference.sha256, actual: digest)
        }
        return bytes
    }

    /// Whether the store holds `file`'s content: linked by a tree (and, `checking`, hashing to its name),
    /// or left by an interrupted sync and still hashing to its name.
    static func holds(_ store: ContentStore, _ file: FileIndex.Entry, checking: Bool) throws -> Bool {
        if store.contains(sha256: file.sha256) {
            guard checking else { return true }
            if try store.checkedForReuse(sha256: file.sha256) { return true }
        }
        let path = store.path(sha256: file.sha256)
        guard FileSystem.fileSize(path) == file.size else { return false }
        return (try? FileHasher.sha256(ofFile: path)) == file.sha256
    }

    /// Fetches `plan`'s frames from the archive at `archiveURL`, builds the tree in staging and checks
    /// it. Returns the staged tree and the bytes the range requests cost. Any failure removes staging and
    /// throws; content already taken into the store stays (it is checked content).
    package func install(
        _ entry: PackageEntry, plan: Plan, archiveURL: URL, received: ProgressCounter
    ) async throws -> StagedTree {
        let staging = try Staging(layout: layout).makeFolder("\(entry.id)-files")
        let frames = try Staging(layout: layout).makeFolder("\(entry.id)-frames")
        defer { try? FileSystem.removeTree(frames) }
        do {
            try await fetchFrames(entry, plan: plan, archiveURL: archiveURL, staging: staging, frames: frames, received: received)
            let layout = self.layout
            return try await runBlocking { try Self.buildTree(entry, files: plan.tree, staging: staging, layout: layout) }
        } catch {
            ContentStore(layout: layout).discardStaging(staging)
            throw error
        }
    }

    /// Decompresses one member's frames through the hardened reader into staging: exactly one regular
    /// file, at the index's path, of its size and sha256.
    func unpackMember(_ file: FileIndex.Entry, from path: String, archiveName: String, staging: String) throws {
        var memberLimits = limits
        memberLimits.maxEntries = 1
        // The frames are checked only by what they unpack to: stop once past the index's size, so a
        // few KiB of frames that inflate to gigabytes are never written whole before the size check.
        memberLimits.maxBytes = min(memberLimits.maxBytes, file.size)
        let name = "\(archiveName) bytes \(file.offset)-\(file.offset + file.length - 1)"
        // The unpacker takes the file into the content store under the sha256 it hashed as it wrote.
        let unpacked = try ArchiveUnpacker(
            limits: memberLimits, archiveName: name, keepFile: ContentStore(layout: layout).keepFile
        )
        .unpack(archivePath: path, into: staging)
        guard unpacked.files.count == 1, let written = unpacked.files[file.path] else {
            throw OfflinePkgError.archiveRefused(
                archive: name, entry: unpacked.files.keys.first, reason: "the frames of \"\(file.path)\" hold another member")
        }
        guard written.size == file.size else {
            throw OfflinePkgError.sizeMismatch(
                what: "\(name) (\"\(file.path)\")", reason: "\(written.size) bytes, the file index promised \(file.size)")
        }
        guard written.sha256 == file.sha256 else {
            throw OfflinePkgError.hashMismatch(what: "\(name) (\"\(file.path)\")", expected: file.sha256, actual: written.sha256)
        }
    }

    /// Links every file not fetched into this staging (held content, or a path whose content another
    /// path brought) and stages the tree: the tree hash is checked there.
    static func buildTree(_ entry: PackageEntry, files tree: [FileIndex.Entry], staging: String, layout: CacheLayout) throws
        -> StagedTree
    {
        let store = ContentStore(layout: layout)
        let writer = try TreeWriter(root: staging, replacesFiles: false)
        var files = [PackagePath: TreeFile]()
        var folders = Set<PackagePath>()
        for file in tree {
            files[file.path] = TreeFile(sha256: file.sha256, size: file.size)
            var parent = file.path.parent
            while let folder = parent, folders.insert(folder).inserted { parent = folder.parent }
            if FileSystem.exists(staging + "/" + file.path.string) { continue }
            try store.link(sha256: file.sha256, into: writer, at: file.path)
        }
        return try Staging(layout: layout).stage(files, folders: folders, in: staging, entry: entry)
    }
}
