import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// `store.activations` (README.md, "Reloading on a new release"): one element per switch, whether this process's `Updater` made it or
/// another process (`offlinepkg sync`, `rollback`) did.
@Suite struct ActivationsTests {
    struct Release {
        let scratch: TemporaryDirectory
        let repository: RepositoryBuilder

        init() throws {
            scratch = try TemporaryDirectory()
            repository = try RepositoryBuilder(directory: scratch.path("repo"))
        }

        func publish(_ version: String, sequence: Int) throws {
            let site = scratch.path("site-\(version)")
            try writeSite(["index.html": "<title>release \(version)</title>"], to: site)
            try repository.publish(
                sequence: sequence,
                packages: [.init(id: "home", version: version, routes: ["https://m.example.com/home/"], site: site)])
        }
    }

    /// The next element of `stream`, or nil after `seconds`.
    static func next(_ stream: AsyncStream<ActiveSet>, within seconds: Double) async -> ActiveSet? {
        await withTaskGroup(of: ActiveSet?.self) { group in
            group.addTask {
                var iterator = stream.makeAsyncIterator()
                return await iterator.next()
            }
            group.addTask {
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Test func yieldsASwitchMadeInThisProcess() async throws {
        let release = try Release()
        try release.publish("1", sequence: 1)
        let store = try PackageStore(root: URL(fileURLWithPath: release.scratch.path("root")))
        let stream = store.activations
        _ = try await Updater(store: store, manifestURL: release.repository.manifestURL).sync()
        let set = try #require(await Self.next(stream, within: 5))
        #expect(set.packages.map(\.version) == ["1"])
        #expect(set.generation == store.activeSet.generation)
    }

    @Test func yieldsASwitchMadeByAnotherProcess() async throws {
        let release = try Release()
        try release.publish("1", sequence: 1)
        let root = release.scratch.path("root")
        let manifest = release.repository.manifestURL.absoluteString
        #expect(try OfflinePkgBinary.run(["sync", manifest, "--root", root, "--quiet"]).status == 0)
        let store = try PackageStore(root: URL(fileURLWithPath: root))
        let stream = store.activations
        try release.publish("2", sequence: 2)
        #expect(try OfflinePkgBinary.run(["sync", manifest, "--root", root, "--quiet"]).status == 0)
        // The watcher polls every 0.5 s; a second is the bound of docs/protocol.md#the-loopback-server, 5 s leaves room for a loaded machine.
        let second = try #require(await Self.next(stream, within: 5))
        #expect(second.packages.map(\.version) == ["2"])
        #expect(try OfflinePkgBinary.run(["rollback", "--root", root]).status == 0)
        let back = try #require(await Self.next(stream, within: 5))
        #expect(back.packages.map(\.version) == ["1"])
        #expect(back.generation > second.generation)
    }

    @Test func nothingIsYieldedWithoutASwitch() async throws {
        let release = try Release()
        try release.publish("1", sequence: 1)
        let store = try PackageStore(root: URL(fileURLWithPath: release.scratch.path("root")))
        let updater = Updater(store: store, manifestURL: release.repository.manifestURL)
        _ = try await updater.sync()
        let stream = store.activations
        _ = try await updater.sync()  // up to date: no switch
        #expect(await Self.next(stream, within: 1.2) == nil)
    }

    @Test func customSchemesResolveAsTheirTarget() async throws {
        let release = try Release()
        try release.publish("1", sequence: 1)
        let root = URL(fileURLWithPath: release.scratch.path("root"))
        let plain = try PackageStore(root: root)
        _ = try await Updater(store: plain, manifestURL: release.repository.manifestURL).sync()
        #expect(plain.resolve("app://m.example.com/home/") == nil)
        let store = try PackageStore(root: root, options: .init(customSchemes: ["App": "https"]))
        let hit = try #require(store.resolve("app://m.example.com/home/index.html"))
        #expect(hit == store.resolve("https://m.example.com/home/index.html"))
        #expect(store.resolve(URL(string: "APP://M.example.com/home/")!) == hit)
        #expect(store.resolve("https://m.example.com/home/") == hit)
        #expect(store.resolve("other://m.example.com/home/") == nil)
        #expect(try store.data(for: "app://m.example.com/home/")?.1 == Data("<title>release 1</title>".utf8))
        #expect(throws: OfflinePkgError.self) { try PackageStore(root: root, options: .init(customSchemes: ["app": "ftp"])) }
        #expect(throws: OfflinePkgError.self) { try PackageStore(root: root, options: .init(customSchemes: ["1x": "https"])) }
    }
}
