import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

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
