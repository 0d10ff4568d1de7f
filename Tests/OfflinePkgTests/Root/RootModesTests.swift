import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// A cache root is its user's alone (docs/protocol.md#neighbours-on-the-device).
@Suite("Root modes")
struct RootModesTests {
    /// Each opener refuses a root another user owns, to root too (the test runs as root): the store, the
    /// writer and the runtime cache, and none of them makes anything in it.
    @Test(.enabled(if: LocalUser.available, "needs root to give a folder to another user"))
    func everyOpenerRefusesARootAnotherUserOwns() throws {
        let scratch = try TemporaryDirectory()
        let root = try scratch.makeDirectory("root")
        chmod(root, 0o777)
        try LocalUser.hostile.own(root)
        let url = URL(fileURLWithPath: root)
        let errors = [
            #expect(throws: OfflinePkgError.self) { try PackageStore(root: url, options: .init(watchInterval: 0)) },
            #expect(throws: OfflinePkgError.self) { try CacheRoot(creating: root) },
            #expect(throws: OfflinePkgError.self) { try RuntimeCache(root: url) },
        ]
        for error in errors {
            #expect("\(error.map { "\($0)" } ?? "")".contains("cache root \(root) is owned by uid"), "\(String(describing: error))")
            #expect("\(error.map { "\($0)" } ?? "")".contains("(opk-b)"))
        }
        #expect(FileSystem.contents(of: root).isEmpty)
    }
}
