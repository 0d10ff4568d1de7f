/// An immutable table for one active set: every answerable URL key mapped straight to its `Resource`,
/// plus the routes for navigation fallbacks. Built once per switch; resolves only read it.
package final class LookupIndex: Sendable {
    package let set: ActiveSet
    /// Every tree this index answers from: a reader's lease keeps them from garbage collection.
    package let trees: [String]
    private let exact: [String: Resource]
    private let routes: [String: Resource?]

    package static let empty = LookupIndex(set: .empty, trees: [], exact: [:], routes: [:])

    private init(set: ActiveSet, trees: [String], exact: [String: Resource], routes: [String: Resource?]) {
        self.set = set
        self.trees = trees
        self.exact = exact
        self.routes = routes
    }

    /// Builds the table from the `.index` files of the set's trees.
    package convenience init(set: ActiveSet, layout: CacheLayout) throws {
        var candidates = [(key: String, route: String, resource: Resource)]()
        var routes = [String: Resource?]()
        var trees = [String]()
        for package in set.packages {
            let tree = layout.tree(id: package.id, version: package.version, treeHash: package.tree)
            let indexPath = layout.treeIndex(id: package.id, version: package.version, treeHash: package.tree)
            let files = try TreeIndexFile.decode(FileSystem.read(indexPath, limit: 1 << 30), path: indexPath)
            trees.append(tree)
            var resources = [String: Resource]()
            for (path, file) in files {
                resources[path] = Resource(
                    path: tree + "/" + path, size: file.size, sha256: file.sha256, packageID: package.id,
                    version: package.version)
            }
            let entrySuffix = "/" + package.entry
            for route in package.routes {
                guard let routeKey = RouteKey.normalized(route) else { continue }
                routes[routeKey] = package.fallback.flatMap { resources[$0] }
                for (path, resource) in resources {
                    candidates.append((routeKey + path, routeKey, resource))
                    // A folder URL ("…/docs/") answers with the folder's entry file.
                    if path == package.entry {
                        candidates.append((routeKey, routeKey, resource))
                    } else if path.hasSuffix(entrySuffix) {
                        candidates.append((routeKey + path.dropLast(package.entry.count), routeKey, resource))
                    }
                }
            }
        }
        // The longest route owns its whole prefix: a file of an outer package never answers for a URL
        // inside a nested route, even when the nested package lacks that file.
        var exact = [String: Resource]()
        for candidate in candidates where Self.longestRoute(in: candidate.key, routes: routes) == candidate.route {
            exact[candidate.key] = candidate.resource
        }
        self.init(set: set, trees: trees, exact: exact, routes: routes)
    }

    private static func longestRoute(in key: String, routes: [String: Resource?]) -> String? {
        var end = key.endIndex
        while let slash = key[..<end].lastIndex(of: "/") {
            let prefix = String(key[...slash])
            if routes[prefix] != nil { return prefix }
            end = slash
        }
        return nil
    }

    /// SPEC §7 resolution over a normalised key.
    package func resolve(_ url: LookupURL) -> Resource? {
        if let hit = exact[url.key] { return hit }
        // Miss: find the longest route that prefixes the key; a navigation miss gets its fallback.
        let key = url.key
        let path = url.path
        let lastSegment = path[(path.lastIndex(of: "/").map { path.index(after: $0) } ?? path.startIndex)...]
        guard !lastSegment.contains(".") else { return nil }
        var end = key.endIndex
        while let slash = key[url.pathStart..<end].lastIndex(of: "/") {
            if let fallback = routes[String(key[...slash])] { return fallback }
            end = slash
        }
        return nil
    }
}
