import Foundation
import OfflinePkg

/// Publishes site folders into a repository folder the way an outside publisher would: `bsdtar` for
/// the archive, the tree hash of docs/protocol.md#the-tree-hash, a `manifest.json` with a raised sequence. Tests and benchmarks
/// then sync from its `file://` manifest URL through the real `Updater`.
public struct RepositoryBuilder: Sendable {
    /// One package of a release: a site folder and how the manifest describes it.
    public struct Package: Sendable {
        public var id: String
        public var version: String
        public var routes: [String]
        public var entry: String?
        public var fallback: String?
        /// Folder whose contents become the package.
        public var site: String

        public init(id: String, version: String, routes: [String], entry: String? = nil, fallback: String? = nil, site: String) {
            self.id = id
            self.version = version
            self.routes = routes
            self.entry = entry
            self.fallback = fallback
            self.site = site
        }
    }

    public let directory: String
    public var manifestURL: URL { URL(fileURLWithPath: directory + "/manifest.json") }

    public init(directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory + "/archives", withIntermediateDirectories: true)
    }

    /// Writes archives for `packages` and a manifest with `sequence` that lists exactly them, with the
    /// stock-tool helpers of `SiteBuilder.swift` (bsdtar, sha256sum, the coreutils tree hash).
    public func publish(sequence: Int, packages: [Package]) throws {
        let entries = try packages.map { package in
            try packSite(
                package.site, id: package.id, version: package.version, routes: package.routes, repo: directory,
                entry: package.entry, fallback: package.fallback)
        }
        try writeManifest(packages: entries, sequence: sequence, to: directory + "/manifest.json")
    }
}

/// Generated sites for tests and benchmarks (written with `writeFile`, as `writeSite` writes).
public enum SiteWriter {
    /// A site of about `count` files spread over nested folders (about 40 per folder), with an
    /// `index.html` in each folder: what a large bundle with assets looks like to a lookup table.
    public static func generateLargeSite(into folder: String, count: Int) throws -> [String] {
        var paths = [String]()
        let extensions = ["js", "css", "png", "svg", "json", "woff2", "html", "map"]
        var index = 0
        while paths.count < count {
            let directory = "assets/section-\(index / 400)/group-\(index / 40 % 10)"
            let name = index % 40 == 0 ? "index.html" : "file-\(index).\(extensions[index % extensions.count])"
            let path = directory + "/" + name
            try writeFile(Data("content of \(path)\n".utf8), to: folder + "/" + path)
            paths.append(path)
            index += 1
        }
        return paths
    }
}
