/// An immutable table for one active set: every answerable URL key mapped straight to its `Resource`,
/// plus the routes for navigation fallbacks. Built once per switch; resolves only read it.
package final class LookupIndex: Sendable {
    package let set: ActiveSet
    /// Every tree this index answers from: a reader's lease keeps them from garbage collection.
    package let trees: [String]
    private let resources: [Resource]
    /// Key → index in `resources`.
    private let exact: ByteKeyTable
    /// Route key → index of the route's fallback in `resources`, or -1 for a route without one.
    private let routes: ByteKeyTable
    /// Route keys with the package that lists them, longest first: to say which package lacks a file.
    private let owners: [(key: [UInt8], package: InstalledPackage)]

    package static let empty = LookupIndex(set: .empty, trees: [], resources: [], exact: [], routes: [])

    private init(set: ActiveSet, trees: [String], resources: [Resource], exact: [([UInt8], Int32)], routes: [([UInt8], Int32)]) {
        self.set = set
        owners = set.packages.flatMap { package in
            package.routes.compactMap { route in RouteKey.normalized(route).map { (Array($0.utf8), package) } }
        }.sorted { $0.key.count > $1.key.count }
        self.trees = trees
        self.resources = resources
        self.exact = ByteKeyTable(exact.lazy.map { (key: $0.0, value: $0.1) })
        self.routes = ByteKeyTable(routes.lazy.map { (key: $0.0, value: $0.1) })
    }

    /// Builds the table from the `.index` files of the set's trees.
    package convenience init(set: ActiveSet, layout: CacheLayout) throws {
        var resources = [Resource]()
        var candidates = [(key: String, route: String, resource: Int32)]()
        var routes = [String: Int32]()
        var trees = [String]()
        for package in set.packages {
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            let indexPath = layout.treeIndex(id: package.id, version: package.version, treeHash: package.tree)
            // A package whose index is damaged answers nothing (its routes miss) instead of taking every
            // other package down with it; `verify` names it and `verify --repair` fetches it again.
            guard let files = try? TreeIndexFile.decode(FileSystem.read(indexPath, limit: 1 << 30), path: indexPath) else {
                continue
            }
            trees.append(tree)
            var numbers = [String: Int32]()
            for (path, file) in files {
                numbers[path] = Int32(resources.count)
                resources.append(
                    Resource(
                        path: tree + "/" + path, size: file.size, sha256: file.sha256, packageID: package.id,
                        version: package.version))
            }
            let entrySuffix = "/" + package.entry
            for route in package.routes {
                guard let routeKey = RouteKey.normalized(route) else { continue }
                routes[routeKey] = package.fallback.flatMap { numbers[$0] } ?? -1
                for (path, number) in numbers {
                    candidates.append((routeKey + path, routeKey, number))
                    // A folder URL ("…/docs/") answers with the folder's entry file.
                    if path == package.entry {
                        candidates.append((routeKey, routeKey, number))
                    } else if path.hasSuffix(entrySuffix) {
                        candidates.append((routeKey + path.dropLast(package.entry.count), routeKey, number))
                    }
                }
            }
        }
        // The longest route owns its whole prefix: a file of an outer package never answers for a URL
        // inside a nested route, even when the nested package lacks that file.
        let exact = candidates.filter { Self.longestRoute(in: $0.key, routes: routes) == $0.route }
        self.init(
            set: set, trees: trees, resources: resources, exact: exact.map { (Array($0.key.utf8), $0.resource) },
            routes: routes.map { (Array($0.key.utf8), $0.value) })
    }

    private static func longestRoute(in key: String, routes: [String: Int32]) -> String? {
        var end = key.endIndex
        while let slash = key[..<end].lastIndex(of: "/") {
            let prefix = String(key[...slash])
            if routes[prefix] != nil { return prefix }
            end = slash
        }
        return nil
    }

    /// SPEC §7 resolution of an absolute http(s) URL.
    package func resolve(_ url: String) -> Resource? {
        // Borrow the string's bytes where they lie; a copy is made only for a bridged or foreign string.
        // The closures capture an unmanaged reference, not `self`: a closure over `self` made the
        // optimiser retain and release the index around every call (two atomic operations, ~10 ns).
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
    /// that package would have to hold); nil when no route covers `url`.
    package func owner(of url: String) -> (package: InstalledPackage, path: String)? {
        LookupURL.withKey(url) { key in
            let bytes = Array(key.bytes)
            guard let owner = owners.first(where: { bytes.starts(with: $0.key) }) else { return nil }
            return (owner.package, String(decoding: bytes[owner.key.count...], as: UTF8.self))
        }
    }

    /// SPEC §7 resolution over a normalised key.
    @inline(__always)
    package func resolve(_ key: LookupURL.Key) -> Resource? {
        let bytes = key.bytes
        if let hit = exact.value(for: UnsafeRawBufferPointer(bytes)) { return resources[Int(hit)] }
        // Miss: only a navigation (last segment without a ".") gets a fallback, from the longest route
        // that prefixes the key — a nested route without a fallback answers nothing.
        var slash = bytes.count - 1
        while slash > key.pathStart && bytes[slash] != UInt8(ascii: "/") {
            if bytes[slash] == UInt8(ascii: ".") { return nil }
            slash -= 1
        }
        while slash >= key.pathStart {
            if bytes[slash] == UInt8(ascii: "/"),
                let fallback = routes.value(for: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[...slash])))
            {
                return fallback >= 0 ? resources[Int(fallback)] : nil
            }
            slash -= 1
        }
        return nil
    }
}
