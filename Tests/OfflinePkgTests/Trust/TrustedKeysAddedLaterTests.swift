import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

@Suite("Trusted keys added later")
struct TrustedKeysAddedLaterTests {
    @Test func keysConfiguredAfterAnUnsignedSyncFetchTheSignatureEvenOnA304() async throws {
        let setup = try AttackProtectionTests.Setup()
        try setup.sign()
        let nginx = try NginxServer(documentRoot: setup.repo.path)
        let url = nginx.url("manifest.json")
        _ = try await Updater(store: setup.store, manifestURL: url).sync()
        // Now the shell ships with a key: the manifest is unchanged (304), its signature still checked.
        let report = try await Updater(store: setup.store, manifestURL: url, options: .init(trustedKeys: setup.trusted())).sync()
        #expect(report.outcome == .upToDate)
        #expect(nginx.requestCount(path: "/manifest.json.minisig") == 1)
        // And a wrong key refuses it, even though nothing changed on the server.
        await #expect {
            try await Updater(store: setup.store, manifestURL: url, options: .init(trustedKeys: setup.trusted("other"))).sync()
        } throws: { error in "\(error)".contains("which is not trusted") }
    }
}
