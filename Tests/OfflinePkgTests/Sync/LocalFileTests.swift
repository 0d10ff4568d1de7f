import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Local files")
struct LocalFileTests {
    @Test func aRemoteManifestCannotPointAtLocalFiles() async throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "x")])
        repo.edit("home") { entry in
            var archive = entry["archive"] as! [String: Any]
            archive["url"] = "file:///etc/hostname"
            entry["archive"] = archive
        }
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory()
        let store = try PackageStore(root: root.url, options: .init(watchInterval: 0))
        await #expect {
            try await Updater(store: store, manifestURL: nginx.url("manifest.json")).sync()
        } throws: { error in
            "\(error)".contains("is a file URL, which only a file manifest may use")
                && (error as? OfflinePkgError)?.category == .refused
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path("downloads")).isEmpty)
    }
}
