// What a native shell does with offlinepkg (README.md, "In a host app"): open the cache root, answer the web view's
// requests from it at once, and keep it up to date in the background.
//
//     swift run --package-path Examples/HostShell HostShell <manifest-url> <url>...
import Foundation
import OfflinePkg

let arguments = Array(CommandLine.arguments.dropFirst())
guard let manifest = arguments.first else {
    FileHandle.standardError.write(Data("usage: HostShell <manifest-url> [url...]\n".utf8))
    exit(2)
}
let root = URL(fileURLWithPath: CacheLayout.defaultRoot(environment: ProcessInfo.processInfo.environment))
let store = try PackageStore(root: root)
let updater = Updater(
    store: store, manifestURL: try ManifestLocation.url(from: manifest),
    options: .init(minInterval: 3600, jitter: 300))

// First launch: nothing installed yet, so wait for one sync; later launches answer from what is there.
if store.activeSet.packages.isEmpty {
    let report = try await updater.sync()
    print("first sync: \(report.outcome.rawValue), set \(report.generation)")
}
// Then check every hour (plus jitter) while the shell runs.
updater.start()

for url in arguments.dropFirst() {
    // What a scheme handler does: resolve, then hand the bytes and type to the web view.
    if let (resource, bytes) = try store.data(for: url) {
        print(
            "\(url) -> \(resource.packageID) \(resource.version) \(resource.mimeType), \(bytes.count) bytes, etag \(resource.etag)"
        )
    } else {
        print("\(url) -> not offline (load from the network or show an error page)")
    }
}
updater.stop()
