import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// A fresh folder under the system temp dir, removed (read-only trees included) when released.
final class TemporaryFolder: Sendable {
    let path: String

    init(_ label: String = "publish") throws {
        var template = Array((NSTemporaryDirectory() + "/offlinepkg-\(label)-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw OfflinePkgError.io(path: "mkdtemp", operation: "mkdtemp", Errno.current)
        }
        path = try FileSystem.realPath(String(cString: made))
    }

    func sub(_ name: String) -> String { path + "/" + name }

    deinit { try? FileSystem.removeTree(path) }
}

/// Runs `script` with bash, failing the test on a non-zero exit; returns stdout.
@discardableResult
func shell(_ script: String, environment: [String: String] = [:]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = ["-euo", "pipefail", "-c", script]
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    let stderr = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw ShellFailure(script: script, status: process.terminationStatus, stderr: String(decoding: stderr, as: UTF8.self))
    }
    return String(decoding: stdout, as: UTF8.self)
}

struct ShellFailure: Error, CustomStringConvertible {
    var script: String
    var status: Int32
    var stderr: String
    var description: String { "bash exited \(status): \(stderr)\nscript: \(script)" }
}

/// SPEC §4's reference pipeline (one copy, in the test support).
func coreutilsTreeHash(_ folder: String) throws -> String {
    try OfflinePkgTestSupport.treeHash(of: folder)
}

/// Whether two folders hold the same files with the same bytes (`diff -r`).
func sameFiles(_ a: String, _ b: String) -> Bool {
    (try? shell("diff -r '\(a)' '\(b)'")) != nil
}

/// Deterministic, incompressible content: what a file of a given version holds.
func content(_ seed: String, size: Int) -> [UInt8] {
    var out = [UInt8]()
    var block = SHA256.hash(Array(seed.utf8)).bytes
    while out.count < size {
        out.append(contentsOf: block)
        block = SHA256.hash(block).bytes
    }
    return Array(out.prefix(size))
}

/// Writes a site: `files` maps relative paths to contents.
func writeSite(_ root: String, _ files: [String: [UInt8]]) throws {
    try FileSystem.makeDirectories(root)
    for (path, bytes) in files {
        let target = root + "/" + path
        try FileSystem.makeDirectories(FileSystem.parentPath(target))
        try FileSystem.writeAtomically(bytes, to: target)
    }
}

/// Three versions of a small web site, 40-odd files in nested folders. v2 changes two files, deletes
/// one and adds one in a new folder; v3 changes one, deletes a whole folder and adds two.
enum DemoSite {
    static func files(version: Int) -> [String: [UInt8]] {
        var files = [String: [UInt8]]()
        files["index.html"] = Array("<!doctype html><title>v\(version >= 2 ? 2 : 1)</title>\n".utf8)
        for page in 0..<8 { files["pages/page-\(page).html"] = content("page \(page)", size: 1500) }
        for image in 0..<12 { files["img/photo-\(image).jpg"] = content("img \(image)", size: 3000) }
        for script in 0..<10 { files["js/lib/module-\(script).js"] = content("js \(script)", size: 2000) }
        for style in 0..<6 { files["css/theme/part-\(style).css"] = content("css \(style)", size: 800) }
        files["old/legacy.js"] = content("legacy", size: 900)
        files["old/legacy.css"] = content("legacy css", size: 400)
        files["robots.txt"] = Array("User-agent: *\n".utf8)
        if version >= 2 {
            files["js/lib/module-3.js"] = content("js 3 v2", size: 2100)
            files["robots.txt"] = nil
            files["fonts/sans.woff2"] = content("font", size: 1200)
        }
        if version >= 3 {
            files["css/theme/part-1.css"] = content("css 1 v3", size: 820)
            files["old/legacy.js"] = nil
            files["old/legacy.css"] = nil
            files["js/app.js"] = content("app v3", size: 700)
            files["about/index.html"] = Array("<p>about</p>\n".utf8)
        }
        return files
    }

    static let route = "https://m.example.com/app/"

    static func request(site: String, version: Int, format: ArchiveFormat = .tarZstd) -> PublishRequest {
        PublishRequest(site: site, id: "app", version: "\(version).0", routes: [route], format: format)
    }
}

/// Collects sync events from the sync's threads.
final class EventLog: Sendable {
    private let events = Mutex<[SyncEvent]>([])
    func append(_ event: SyncEvent) { events.withLock { $0.append(event) } }
    var all: [SyncEvent] { events.withLock { $0 } }

    var deltaFailures: [OfflinePkgError] {
        all.compactMap { if case .deltaFailed(_, _, let error) = $0 { error } else { nil } }
    }
}

/// Syncs a cache root from a repository's manifest through the library, as a host app would.
func syncDevice(root: String, repo: String, events: EventLog = EventLog()) async throws -> SyncReport {
    let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
    let options = Updater.Options(retry: RetryPolicy(attempts: 1), events: { events.append($0) })
    return try await Updater(store: store, manifestURL: URL(fileURLWithPath: repo + "/manifest.json"), options: options).sync()
}

/// The installed tree of a package version in a cache root.
func installedTree(root: String, id: String, version: String, tree: String) -> String {
    CacheLayout(root: root).tree(id: id, version: version, treeHash: tree)
}

func inode(_ path: String) -> UInt64? {
    var info = stat()
    return lstat(path, &info) == 0 ? UInt64(info.st_ino) : nil
}
