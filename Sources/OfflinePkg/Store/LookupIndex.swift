#if canImport(Glibc)
import Glibc
#endif

/// The lookup state of one active set: its routes in a small table, and for each package the memory
/// mapped lookup table of its tree (`TreeLookupTable`). Opening it costs one map per package, whatever
/// the number of files; a `Resource` is made the first time its file is answered and kept for the next.
///
/// Not thread-safe on its own: `resolve` fills the per-file `Resource` cache. `PackageStore` calls it
/// only under its snapshot lock, which also makes a switch atomic for readers.
package final class LookupIndex: @unchecked Sendable {
    package let set: ActiveSet
    /// Every tree this index answers from: a reader's lease keeps them from garbage collection.
    package let trees: [String]
    private let packages: [PackageLookup]
    /// `packages` again, unretained, for the hot path: taking a class reference out of an array retains
    /// and releases it around its use, two atomic operations per resolve. `packages` owns them.
    private let borrowedPackages: [Unmanaged<PackageLookup>]
    /// Route key → number in `routes`.
    private let routeTable: ByteKeyTable
    private let routes: [RouteLookup]
    /// The distinct lengths of the route keys, longest first: a key is probed at these lengths only.
    private let routeLengths: [Int]

    private struct RouteLookup {
        var package: Int
        /// Record number of the route's fallback file in its package's table, or nil.
        var fallback: Int?
    }

    private final class PackageLookup {
        let package: InstalledPackage
        let tree: String
        let table: TreeLookupTable
        let entry: [UInt8]
        /// The fallback's path bytes, made once: a navigation miss should not allocate.
        let fallbackPath: [UInt8]
        /// One slot per file of the tree: nil until the file is first answered, then its `Resource`
        /// (unretained: `made` owns it). An anonymous map of zero pages, so opening costs no work per
        /// file and only the pages of answered files become memory (8 bytes a file at most). The hot
        /// path reads the slot alone: no array of a class, whose access and bounds checks would be a
        /// large part of a resolve (the `resolve` row of docs/performance.md).
        private let answers: UnsafeMutablePointer<UnsafeMutableRawPointer?>
        private let answerPages: ZeroPages
        /// The resources answered, in the order they were first asked for: their owner.
        private var made: [Resource] = []

        init(package: InstalledPackage, tree: String, table: TreeLookupTable) {
            self.package = package
            self.tree = tree
            self.table = table
            entry = Array(package.entry.utf8)
            fallbackPath = Array((package.fallback ?? "").utf8)
            answerPages = ZeroPages(byteCount: max(1, table.fileCount) * MemoryLayout<UnsafeMutableRawPointer?>.stride)
            answers = answerPages.base.bindMemory(to: UnsafeMutableRawPointer?.self, capacity: max(1, table.fileCount))
        }

        deinit { answerPages.release() }

        /// Whether the tree holds `folder/entry` (the entry file alone for an empty `folder`).
        func holdsEntry(inFolder folder: UnsafeRawBufferPointer) -> Bool {
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: folder.count + 1 + entry.count) { buffer in
                let joined = UnsafeMutableRawBufferPointer(buffer)
                joined.copyMemory(from: folder)
                var used = folder.count
                if used > 0 {
                    joined[used] = UInt8(ascii: "/")
                    used += 1
                }
                UnsafeMutableRawBufferPointer(rebasing: joined[used...]).copyBytes(from: entry)
                return table.find(UnsafeRawBufferPointer(rebasing: joined[0..<(used + entry.count)])) != nil
            }
        }

        func resource(_ number: Int, path: UnsafeRawBufferPointer) -> Resource {
            if let known = answers[number] { return Resource(unretained: known) }
            let record = table.record(number)
            let resource = Resource(
                path: tree + "/" + String(decoding: path, as: UTF8.self), size: record.size, sha256: record.sha256,
                packageID: package.id, version: package.version)
            made.append(resource)
            answers[number] = resource.unretained
            return resource
        }

        /// Files answered so far, and the pages of answer slots in memory (tests).
        var answered: Int { made.count }
        var residentSlotPages: Int { answerPages.residentPages }
    }

    package static let empty = LookupIndex(set: .empty, layout: nil)

    /// Opens the lookup tables of the set's trees (see `TreeLookupTable`). A tree installed before
    /// tables were written has its table built in memory from its `.index` listing.
    package convenience init(set: ActiveSet, layout: CacheLayout) throws {
        self.init(set: set, layout: Optional(layout))
    }

    private init(set: ActiveSet, layout: CacheLayout?) {
        self.set = set
        var packages = [PackageLookup]()
        var routes = [RouteLookup]()
        var keys = [(key: [UInt8], value: Int32)]()
        for package in set.packages {
            guard let layout else { break }
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            // A package whose tables are damaged answers nothing (its routes miss) instead of taking every
            // other package down with it; `verify` names it and `verify --repair` fetches it again.
            guard let table = Self.table(for: package, layout: layout) else { continue }
            let lookup = PackageLookup(package: package, tree: tree, table: table)
            let fallback = package.fallback.flatMap { name in
                Array(name.utf8).withUnsafeBytes { table.find($0) }
            }
            for route in package.routes {
                guard let routeKey = RouteKey.normalized(route) else { continue }
                keys.append((Array(routeKey.utf8), Int32(routes.count)))
                routes.append(RouteLookup(package: packages.count, fallback: fallback))
            }
            packages.append(lookup)
        }
        self.packages = packages
        borrowedPackages = packages.map { Unmanaged.passUnretained($0) }
        self.routes = routes
        trees = packages.map(\.tree)
        routeTable = ByteKeyTable(keys)
        routeLengths = Set(keys.map(\.key.count)).sorted(by: >)
    }

    private static func table(for package: InstalledPackage, layout: CacheLayout) -> TreeLookupTable? {
        let path = layout.treeLookup(id: package.id, version: package.version, treeHash: package.tree)
        if let mapped = try? TreeLookupTable(contentsOf: path) { return mapped }
        let index = layout.treeIndex(id: package.id, version: package.version, treeHash: package.tree)
        guard let files = try? TreeIndexFile.decode(FileSystem.read(index, limit: 1 << 30), path: index) else { return nil }
        return TreeLookupTable(encoding: files)
    }

    /// Per package: files answered so far and pages of answer slots in memory (tests).
    package var answerSlots: [(answered: Int, residentPages: Int)] { packages.map { ($0.answered, $0.residentSlotPages) } }

    /// docs/protocol.md#lookups resolution of an absolute http(s) URL.
    package func resolve(_ url: String) -> Resource? {
        // Borrow the string's bytes where they lie; a copy is made only for a bridged or foreign string.
        // The closures capture an unmanaged reference, not `self`: a closure over `self` made the
        // optimiser retain and release the index around every call (two atomic operations).
        // The caller keeps the index alive for the whole call.
        let index = Unmanaged.passUnretained(self)
        switch url.utf8.withContiguousStorageIfAvailable({ bytes in
            index._withUnsafeGuaranteedRef { $0.resolve(utf8: bytes) }
        }) {
        case .some(let answer): return answer
        case .none:
            var copy = url
            return copy.withUTF8 { bytes in index._withUnsafeGuaranteedRef { $0.resolve(utf8: bytes) } }
        }
    }

    package func resolve(utf8 url: UnsafeBufferPointer<UInt8>) -> Resource? {
        let index = Unmanaged.passUnretained(self)  // as above: no retain of `self` per call
        return LookupURL.withKey(utf8: url) { key in index._withUnsafeGuaranteedRef { $0.resolve(key) } }
    }

    /// The package whose route is the longest prefix of `url`, and the rest of the decoded path (what
    /// that package would have to hold); nil when no route covers `url`. For serve's 404 message only.
    package func owner(of url: String) -> (package: InstalledPackage, path: String)? {
        LookupURL.withKey(url) { key in
            let bytes = UnsafeRawBufferPointer(key.bytes)
            guard let (route, length) = longestRoute(bytes) else { return nil }
            return (packages[route.package].package, String(decoding: bytes[length...], as: UTF8.self))
        }
    }

    /// docs/protocol.md#lookups resolution over a normalised key: the longest route that prefixes the key picks the
    /// package; the rest of the path names its file (a folder URL its entry file); a navigation miss
    /// gets the route's fallback. The longest route owns its whole prefix: a file of an outer package
    /// never answers for a URL inside a nested route, even when the nested package lacks that file.
    @inline(__always)
    package func resolve(_ key: LookupURL.Key) -> Resource? {
        let bytes = UnsafeRawBufferPointer(key.bytes)
        guard let (route, length) = longestRoute(bytes) else { return nil }
        return borrowedPackages[route.package]._withUnsafeGuaranteedRef { resolve(key, route: route, length: length, in: $0) }
    }

    /// `resolve` once the route is known: the key's first `length` bytes are `route`, of `package`.
    @inline(__always)
    private func resolve(_ key: LookupURL.Key, route: RouteLookup, length: Int, in package: PackageLookup) -> Resource? {
        let bytes = UnsafeRawBufferPointer(key.bytes)
        let rest = UnsafeRawBufferPointer(rebasing: bytes[length...])
        if rest.isEmpty || rest[rest.count - 1] == UInt8(ascii: "/") {
            // A folder URL answers with the folder's entry file.
            let entry = package.entry
            let answer = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: rest.count + entry.count) { buffer in
                let joined = UnsafeMutableRawBufferPointer(buffer)
                joined.copyMemory(from: rest)
                UnsafeMutableRawBufferPointer(rebasing: joined[rest.count...]).copyBytes(from: entry)
                let path = UnsafeRawBufferPointer(joined)
                return package.table.find(path).map { package.resource($0, path: path) }
            }
            if let answer { return answer }
        } else if let number = package.table.find(rest) {
            return package.resource(number, path: rest)
        }
        // Miss: only a navigation (last segment without a ".") gets the fallback.
        var index = bytes.count - 1
        while index > key.pathStart && bytes[index] != UInt8(ascii: "/") {
            if bytes[index] == UInt8(ascii: ".") { return nil }
            index -= 1
        }
        guard let fallback = route.fallback else { return nil }
        // A folder named without its slash is no navigation miss: its URL is answered by a redirect
        // to the slash (`isFolderWithoutSlash`), as static servers answer it, not by the fallback.
        if !rest.isEmpty && rest[rest.count - 1] != UInt8(ascii: "/")
            && namesFolder(bytes, owner: (Unmanaged.passUnretained(package), length))
        {
            return nil
        }
        return package.fallbackPath.withUnsafeBytes { package.resource(fallback, path: $0) }
    }

    /// The route of the longest prefix of `bytes` (a key), and that prefix's length.
    @inline(__always)
    private func longestRoute(_ bytes: UnsafeRawBufferPointer) -> (route: RouteLookup, length: Int)? {
        for length in routeLengths where length <= bytes.count && bytes[length - 1] == UInt8(ascii: "/") {
            if let number = routeTable.value(for: UnsafeRawBufferPointer(rebasing: bytes[0..<length])) {
                return (routes[Int(number)], length)
            }
        }
        return nil
    }

    /// Whether `key` names a folder without its final slash: with the slash added, it is a route or a
    /// folder of a package, and the package holds that folder's entry file. Static servers answer such
    /// a URL with a redirect to the slash (nginx's `301`), so that the page's relative links resolve
    /// inside the folder.
    package func isFolderWithoutSlash(_ key: LookupURL.Key) -> Bool {
        let bytes = UnsafeRawBufferPointer(key.bytes)
        guard bytes.count > key.pathStart, bytes[bytes.count - 1] != UInt8(ascii: "/") else { return false }
        return namesFolder(bytes, owner: longestRoute(bytes).map { (borrowedPackages[$0.route.package], $0.length) })
    }

    /// `isFolderWithoutSlash` for a key that does not end in `/`, given the package and length of its
    /// longest route (`owner`), which a resolve has already found: every navigation miss with a
    /// fallback asks, so neither the key is copied nor its routes probed again. Only a route one byte
    /// longer than the key can be the key with its slash: a shorter route that prefixes the key with a
    /// slash prefixes the key, and `owner` is the longest of those.
    private func namesFolder(_ bytes: UnsafeRawBufferPointer, owner: (package: Unmanaged<PackageLookup>, length: Int)?) -> Bool {
        if routeLengths.contains(bytes.count + 1) {
            let number = withUnsafeTemporaryAllocation(byteCount: bytes.count + 1, alignment: 1) { withSlash -> Int32? in
                withSlash.copyMemory(from: bytes)
                withSlash[bytes.count] = UInt8(ascii: "/")
                return routeTable.value(for: UnsafeRawBufferPointer(withSlash))
            }
            if let number {
                let route = borrowedPackages[routes[Int(number)].package]
                return route._withUnsafeGuaranteedRef { $0.holdsEntry(inFolder: UnsafeRawBufferPointer(start: nil, count: 0)) }
            }
        }
        guard let (package, length) = owner else { return false }
        let folder = UnsafeRawBufferPointer(rebasing: bytes[length...])
        return package._withUnsafeGuaranteedRef { $0.holdsEntry(inFolder: folder) }
    }
}

/// Zero-filled memory straight from the kernel: an anonymous private map whose pages cost nothing until
/// written, and which goes back whole on release. Not malloc: glibc raises its mmap threshold after the
/// first large free, so later tables came from the heap, were zeroed page by page, and stayed resident.
struct ZeroPages {
    let base: UnsafeMutableRawPointer
    let byteCount: Int
    /// False when the kernel refused a map and the memory came from `calloc`.
    private let mapped: Bool

    init(byteCount: Int) {
        self.byteCount = max(1, byteCount)
        let address = mmap(nil, self.byteCount, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if let address, address != MAP_FAILED {
            (base, mapped) = (address, true)
        } else {
            (base, mapped) = (calloc(1, self.byteCount)!, false)
        }
    }

    /// Pages of the range in memory now (`mincore`); for tests.
    var residentPages: Int {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let count = (byteCount + page - 1) / page
        guard mapped else { return count }
        var vector = [UInt8](repeating: 0, count: count)
        guard mincore(base, byteCount, &vector) == 0 else { return count }
        return vector.reduce(0) { $0 + Int($1 & 1) }
    }

    func release() {
        if mapped { munmap(base, byteCount) } else { free(base) }
    }
}
