import Foundation
import OfflinePkg
import OfflinePkgTestSupport

/// One installed root shared by the resolution tests: published with bsdtar, synced through `Updater`.
///
///     https://app.example.com/        home  (fallback index.html)
///     https://app.example.com/docs/   docs  (nested, no fallback)
///     http://[::1]:8080/              v6
actor LookupFixture {
    static let shared = LookupFixture()

    struct Installed: Sendable {
        let scratch: TemporaryDirectory
        let store: PackageStore
    }

    private var installed: Installed?

    func get() async throws -> Installed {
        if let installed { return installed }
        let scratch = try TemporaryDirectory()
        let home = scratch.path("site/home")
        let docs = scratch.path("site/docs")
        let v6 = scratch.path("site/v6")
        try writeSite(
            [
                "index.html": "home index", "css/site.css": "body{}", "js/app.js": "app()", "a b.html": "space", "100%.txt": "percent",
                "docs/only-in-home.js": "shadowed", "caf\u{e9}.txt": "accent", "help/index.html": "help",
            ], to: home)
        try writeSite(["index.html": "docs index", "guide/index.html": "guide", "page.html": "page"], to: docs)
        try writeSite(["index.html": "v6 index"], to: v6)
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1,
            packages: [
                .init(id: "home", version: "1.0.0", routes: ["https://app.example.com/"], fallback: "index.html", site: home),
                .init(id: "docs", version: "2.0.0", routes: ["https://app.example.com/docs/"], site: docs),
                .init(id: "v6", version: "1.0.0", routes: ["http://[::1]:8080/"], site: v6),
            ])
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
        let result = Installed(scratch: scratch, store: store)
        installed = result
        return result
    }
}
