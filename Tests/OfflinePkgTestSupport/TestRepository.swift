import Foundation

/// A repository folder built the way an outside publisher would (bsdtar, sha256sum, the coreutils tree
/// hash), served by whichever server a test points at `path`.
public final class TestRepository: @unchecked Sendable {
    // Used from one test at a time; not shared between tasks.
    public let directory: TemporaryDirectory
    public var path: String { directory.path("repo") }
    private var entries: [String: [String: Any]] = [:]
    private var order: [String] = []
    public private(set) var sequence = 0
    private var publishes = 0
    /// Top-level manifest fields written by every `publish` (`reports`, `runtime`).
    public var manifestExtra: [String: Any] = [:]

    public init() throws {
        directory = try TemporaryDirectory(prefix: "offlinepkg-repo")
        _ = try directory.makeDirectory("repo/archives")
    }

    /// Builds (or replaces) a package version from `files`; the manifest changes at the next `publish`.
    @discardableResult
    public func add(
        _ id: String, _ version: String, routes: [String], files: [SiteFile], format: BsdtarFormat = .tarGz,
        extra: [String: Any] = [:]
    ) throws -> [String: Any] {
        let site = directory.path("sites/\(id)-\(version)")
        try? FileManager.default.removeItem(atPath: site)
        var entry = try buildPackage(
            id: id, version: version, routes: routes, files: files, site: site, repo: path, format: format)
        entry.merge(extra) { _, new in new }
        if entries[id] == nil { order.append(id) }
        entries[id] = entry
        return entry
    }

    public func remove(_ id: String) {
        entries[id] = nil
        order.removeAll { $0 == id }
    }

    /// Changes fields of a package's entry (e.g. a wrong sha256) before the next `publish`.
    public func edit(_ id: String, _ change: (inout [String: Any]) -> Void) {
        guard var entry = entries[id] else { return }
        change(&entry)
        entries[id] = entry
    }

    /// Writes `manifest.json` with the next sequence (or the one given).
    @discardableResult
    public func publish(sequence: Int? = nil, expires: String? = nil) throws -> [UInt8] {
        self.sequence = sequence ?? self.sequence + 1
        let bytes = try writeManifest(
            packages: order.compactMap { entries[$0] }, sequence: self.sequence, expires: expires, extra: manifestExtra,
            to: manifestPath)
        // nginx's ETag and Last-Modified have one-second resolution: two publishes within a second of the
        // same size would look unchanged to a conditional request. Give each publish its own mtime.
        publishes += 1
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(Double(publishes))], ofItemAtPath: manifestPath)
        return bytes
    }

    public func site(_ id: String, _ version: String) -> String { directory.path("sites/\(id)-\(version)") }
    public func archivePath(_ id: String) -> String {
        path + "/" + ((entries[id]?["archive"] as? [String: Any])?["url"] as! String)
    }
    public func archiveURL(_ id: String) -> String { (entries[id]?["archive"] as? [String: Any])?["url"] as! String }
    public var manifestPath: String { path + "/manifest.json" }
}
