import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// A site holding `café.txt` precomposed and decomposed, published with stock bsdtar: the sync accepts
/// it and each URL answers the file of its own bytes (docs/protocol.md#conventions: paths are bytes, no normalisation).
@Suite struct NormalisationTwinLookupTests {
    @Test func eachFormAnswersItsOwnFile() async throws {
        let scratch = try TemporaryDirectory()
        let site = scratch.path("site")
        try FileSystem.makeDirectories(site)
        try FileSystem.writeAtomically(Array("home".utf8), to: site + "/index.html")
        try FileSystem.writeAtomically(Array("precomposed".utf8), to: site + "/caf\u{e9}.txt")
        try FileSystem.writeAtomically(Array("decomposed".utf8), to: site + "/cafe\u{301}.txt")
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        try repository.publish(
            sequence: 1, packages: [.init(id: "twins", version: "1", routes: ["https://twins.example.com/"], site: site)])
        let store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: 0))
        _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()

        let precomposed = try #require(store.resolve("https://twins.example.com/caf%C3%A9.txt"))
        let decomposed = try #require(store.resolve("https://twins.example.com/cafe%CC%81.txt"))
        #expect(try FileSystem.read(precomposed.path) == Array("precomposed".utf8))
        #expect(try FileSystem.read(decomposed.path) == Array("decomposed".utf8))
        #expect(precomposed.etag != decomposed.etag)
        #expect(try store.writer.verify().isEmpty)
        // The same through the command line, as a host shell asks it.
        for (url, resource) in [("caf%C3%A9.txt", precomposed), ("cafe%CC%81.txt", decomposed)] {
            let cli = await InProcessCLI.run(["lookup", "https://twins.example.com/" + url, "--root", scratch.path("root")])
            #expect(Array(try cli.checked().stdout.utf8) == Array((resource.path + "\n").utf8))
        }
    }
}
