import Foundation
import OfflinePkg

/// Publishes site folders into a repository folder the way an outside publisher would: `bsdtar` for
/// the archive, the SPEC §4 tree hash, a `manifest.json` with a raised sequence. Tests and benchmarks
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

    /// Writes archives for `packages` and a manifest with `sequence` that lists exactly them.
    public func publish(sequence: Int, packages: [Package]) throws {
        var entries = [[String: Any]]()
        for package in packages {
            let name = "archives/\(package.id)-\(package.version).tar.gz"
            let archive = directory + "/" + name
            try Self.run(
                "/usr/bin/bsdtar", ["--uid", "0", "--gid", "0", "--numeric-owner", "-czf", archive, "-C", package.site, "."])
            var entry: [String: Any] = [
                "id": package.id, "version": package.version, "routes": package.routes,
                "archive": [
                    "url": name, "sha256": try FileHasher.sha256(ofFile: archive), "size": FileSystem.fileSize(archive)!,
                ],
                "tree": try Self.treeHash(package.site),
            ]
            if let value = package.entry { entry["entry"] = value }
            if let value = package.fallback { entry["fallback"] = value }
            entries.append(entry)
        }
        let manifest: [String: Any] = ["format": 1, "sequence": sequence, "packages": entries]
        let bytes = try JSONSerialization.data(withJSONObject: manifest, options: [.prettyPrinted, .sortedKeys])
        try FileSystem.writeAtomically(Array(bytes), to: directory + "/manifest.json")
    }

    /// SPEC §4 over a folder, written out here rather than borrowed from the library under test.
    public static func treeHash(_ folder: String) throws -> String {
        var paths = [String]()
        TreeWalker.regularFiles(in: folder) { paths.append($0) }
        paths.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let hasher = SHA256()
        for path in paths {
            hasher.update(Array("\(try FileHasher.sha256(ofFile: folder + "/" + path))  \(path)\n".utf8))
        }
        return hasher.finalize().hex
    }

    /// Runs a stock tool, failing with its stderr when it exits non-zero.
    public static func run(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw OfflinePkgError.unavailable(
                "\(tool) \(arguments.joined(separator: " ")) failed: \(String(decoding: message, as: UTF8.self))")
        }
    }
}

/// Writes files into a folder, creating parents: the generated sites tests and benchmarks publish.
public enum SiteWriter {
    public static func write(_ files: [String: String], into folder: String) throws {
        for (path, text) in files { try write(Data(text.utf8), to: folder + "/" + path) }
    }

    public static func write(_ data: Data, to path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: path))
    }

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
            try write(Data("content of \(path)\n".utf8), to: folder + "/" + path)
            paths.append(path)
            index += 1
        }
        return paths
    }
}
