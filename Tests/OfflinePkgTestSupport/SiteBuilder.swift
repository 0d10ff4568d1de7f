import Foundation

// Builds test repositories with stock tools (bsdtar, coreutils, JSONSerialization), the way an
// outside publisher would, so that tests prove offlinepkg reads what others write rather than
// only what its own code produces.

/// One file of a site folder.
public struct SiteFile: Sendable, Equatable {
    /// Relative path with `/` separators.
    public var path: String
    public var contents: [UInt8]

    public init(_ path: String, _ text: String) {
        self.path = path
        contents = Array(text.utf8)
    }

    public init(_ path: String, bytes: [UInt8]) {
        self.path = path
        contents = bytes
    }
}

/// Writes `files` under `directory` (created if needed), with parent folders: the one site writer of
/// the tests and benchmarks.
public func writeSite(_ files: [SiteFile], to directory: String) throws {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    for file in files { try writeFile(file.contents, to: directory + "/" + file.path) }
}

/// Writes a site given as relative path → text (see `writeSite(_:to:)`).
public func writeSite(_ files: [String: String], to directory: String) throws {
    try writeSite(files.sorted { $0.key < $1.key }.map { SiteFile($0.key, $0.value) }, to: directory)
}

/// Writes a site given as relative path → bytes (see `writeSite(_:to:)`).
public func writeSite(_ files: [String: [UInt8]], to directory: String) throws {
    try writeSite(files.sorted { $0.key < $1.key }.map { SiteFile($0.key, bytes: $0.value) }, to: directory)
}

/// Writes `bytes` to the file `path`, creating its parent folders; with `modified`, sets its mtime.
public func writeFile(_ bytes: some DataProtocol, to path: String, modified: Date? = nil) throws {
    try FileManager.default.createDirectory(
        atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    if let modified { try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path) }
}

/// The archive formats `makeArchive` writes.
public enum BsdtarFormat: String, Sendable, CaseIterable {
    case tar, tarGz, tarXz, tarZst, zip

    /// The usual file extension, without the dot.
    public var fileExtension: String {
        switch self {
        case .tar: "tar"
        case .tarGz: "tar.gz"
        case .tarXz: "tar.xz"
        case .tarZst: "tar.zst"
        case .zip: "zip"
        }
    }

    var bsdtarFlags: [String] {
        switch self {
        case .tar: ["-cf"]
        case .tarGz: ["-czf"]
        case .tarXz: ["-cJf"]
        case .tarZst: ["--zstd", "-cf"]
        case .zip: ["--format", "zip", "-cf"]
        }
    }
}

/// Archives the contents of `directory` with bsdtar, member names starting with `./` as a publisher's
/// would, in the byte order of their paths: `bsdtar -C directory .` takes the file system's order,
/// the reverse of creation on tmpfs, and a test that counts on which of two files comes first would
/// pass on one machine and fail on another.
public func makeArchive(of directory: String, to archivePath: String, format: BsdtarFormat) throws {
    let script = #"cd "$1" && shift && find . -print0 | LC_ALL=C sort -z | bsdtar "$@" --null -n -T -"#
    let archive = archivePath.hasPrefix("/") ? archivePath : FileManager.default.currentDirectoryPath + "/" + archivePath
    try run("/bin/sh", ["-c", script, "sh", directory] + format.bsdtarFlags + [archive]).checked("bsdtar \(format)")
}

/// The sha256 of a file in lowercase hex, from coreutils `sha256sum`.
public func sha256(ofFile path: String) throws -> String {
    let result = try run("sha256sum", ["--", path]).checked("sha256sum \(path)")
    return String(result.stdout.prefix(64))
}

/// The size of a file in bytes, from coreutils `stat`.
public func fileSize(_ path: String) throws -> Int {
    let result = try run("stat", ["-c", "%s", "--", path]).checked("stat \(path)")
    guard let size = Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
        throw TestSupportError("stat \(path): unexpected output \(result.stdout)")
    }
    return size
}

/// The tree hash of docs/protocol.md#the-tree-hash, from exactly the coreutils pipeline it gives: names go to
/// `sha256sum` as `./name` (a file named `-` would otherwise be read as standard input) and the
/// prefix is stripped from its output; `-r` runs nothing for an empty folder (the hash of no text).
public let coreutilsTreeHashPipeline =
    "find . -type f -printf './%P\\0' | LC_ALL=C sort -z | xargs -0 -r sha256sum | sed 's|  \\./|  |' | sha256sum"

public func treeHash(of directory: String) throws -> String {
    let pipeline = "set -o pipefail; cd \"$1\" && " + coreutilsTreeHashPipeline
    let result = try run("bash", ["-c", pipeline, "bash", directory]).checked("tree hash of \(directory)")
    return String(result.stdout.prefix(64))
}

/// A `deltas[]` element (docs/protocol.md#package-entries) for the archive file at `archivePath`, published at `url`.
public func makeDeltaEntry(from version: String, archivePath: String, url: String) throws -> [String: Any] {
    ["from": version, "url": url, "sha256": try sha256(ofFile: archivePath), "size": try fileSize(archivePath)]
}

/// A `packages[]` element (docs/protocol.md#package-entries). The archive's `sha256` and `size` are measured from the file
/// at `archivePath`; `archiveURL` is what the manifest says (relative to it, or absolute). Optional
/// fields left nil are omitted; `extra` adds or overrides any field (unknown ones, broken ones).
public func makeManifestEntry(
    id: String, version: String, routes: [String], archivePath: String, archiveURL: String, tree: String,
    entry: String? = nil, fallback: String? = nil, deltas: [[String: Any]] = [], minShellVersion: String? = nil,
    rollout: Int? = nil, extra: [String: Any] = [:]
) throws -> [String: Any] {
    var package: [String: Any] = [
        "id": id, "version": version, "routes": routes, "tree": tree,
        "archive": ["url": archiveURL, "sha256": try sha256(ofFile: archivePath), "size": try fileSize(archivePath)],
    ]
    if let entry { package["entry"] = entry }
    if let fallback { package["fallback"] = fallback }
    if !deltas.isEmpty { package["deltas"] = deltas }
    if let minShellVersion { package["minShellVersion"] = minShellVersion }
    if let rollout { package["rollout"] = rollout }
    package.merge(extra) { _, new in new }
    return package
}

/// Writes `manifest.json` (format 1) with sorted keys, and returns its bytes.
@discardableResult
public func writeManifest(
    packages: [[String: Any]], sequence: Int, expires: String? = nil, extra: [String: Any] = [:], to path: String
) throws -> [UInt8] {
    var manifest: [String: Any] = ["format": 1, "sequence": sequence, "packages": packages]
    if let expires { manifest["expires"] = expires }
    manifest.merge(extra) { _, new in new }
    let data = try JSONSerialization.data(
        withJSONObject: manifest, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
    try data.write(to: URL(fileURLWithPath: path))
    return [UInt8](data)
}

/// Builds one package the way a publisher would: writes `files` to the folder `site`, archives it
/// to `<repo>/archives/<id>-<version>.<ext>`, and returns its manifest entry (archive URL relative
/// to a manifest at the top of `repo`, tree hash from coreutils). Keep `site` outside `repo` when
/// the repository is served, as a publisher's site folders are not part of what the CDN holds.
public func buildPackage(
    id: String, version: String, routes: [String], files: [SiteFile], site: String, repo: String,
    format: BsdtarFormat = .tarGz
) throws -> [String: Any] {
    try writeSite(files, to: site)
    return try packSite(site, id: id, version: version, routes: routes, repo: repo, format: format)
}

/// Archives the site folder `site` to `<repo>/archives/<id>-<version>.<ext>` and returns its manifest
/// entry (archive URL relative to a manifest at the top of `repo`, tree hash from coreutils): what
/// `buildPackage` and `RepositoryBuilder` publish.
public func packSite(
    _ site: String, id: String, version: String, routes: [String], repo: String, format: BsdtarFormat = .tarGz,
    entry: String? = nil, fallback: String? = nil
) throws -> [String: Any] {
    try FileManager.default.createDirectory(atPath: repo + "/archives", withIntermediateDirectories: true)
    let name = "archives/\(id)-\(version).\(format.fileExtension)"
    try makeArchive(of: site, to: "\(repo)/\(name)", format: format)
    return try makeManifestEntry(
        id: id, version: version, routes: routes, archivePath: "\(repo)/\(name)", archiveURL: name,
        tree: try treeHash(of: site), entry: entry, fallback: fallback)
}
