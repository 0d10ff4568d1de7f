import Foundation
import OfflinePkgTestSupport
import Testing

/// `keygen`, `publish --sign-key` and `sync --trust-key` through the real binary (docs/protocol.md#signatures,
/// §8), checked against the stock `minisign` tool.
@Suite("Signing and trusted keys on the command line")
struct TrustCommandTests {
    /// A scratch folder holding a key pair made by `offlinepkg keygen` (`release.pub`, `release.key`), an
    /// unrelated one (`other.*`), and a repository whose manifest `release.key` signed.
    final class SignedRepository {
        let directory: TemporaryDirectory
        var repo: String { directory.path("repo") }
        var manifest: String { repo + "/manifest.json" }
        var root: String { directory.path("root") }
        var activeSet: String { root + "/active.json" }

        init() async throws {
            directory = try TemporaryDirectory(prefix: "offlinepkg-cli-trust")
            try await keygen("release").checked("keygen release")
            try await keygen("other").checked("keygen other")
            try await publish(version: "1")
        }

        func key(_ name: String) -> String { directory.path(name) }

        func keygen(_ name: String) async throws -> ProcessResult {
            await InProcessCLI.run(["keygen", key(name)])
        }

        /// The key ID that the first line of `<name>.pub` names.
        func keyID(_ name: String) throws -> String {
            let text = try String(contentsOfFile: key(name) + ".pub", encoding: .utf8)
            let comment = try #require(text.split(separator: "\n").first)
            return try #require(comment.split(separator: " ").last.map(String.init))
        }

        /// Publishes a one-page site as `version`, signed with `release.key`.
        func publish(version: String) async throws {
            try directory.write("<p>version \(version)</p>", to: "site-\(version)/index.html")
            try await InProcessCLI.run([
                "publish", directory.path("site-\(version)"), "--repo", repo, "--id", "web", "--version", version,
                "--route", "https://m.example.com/", "--sign-key", key("release") + ".key", "--quiet",
            ]).checked("publish \(version)")
        }

        /// `offlinepkg sync` of the repository with a `--trust-key` for each of `keyFiles`, in order.
        func sync(trusting keyFiles: [String]) async throws -> ProcessResult {
            await InProcessCLI.run(
                ["sync", manifest, "--root", root, "--quiet"] + keyFiles.flatMap { ["--trust-key", $0] })
        }
    }

    @Test func aSignedPublishVerifiesWithStockMinisignAndWithTrustKey() async throws {
        let signed = try await SignedRepository()
        // minisign -V reads the signature from <file>.minisig, the name publish must write.
        let stock = try run("minisign", ["-V", "-p", signed.key("release") + ".pub", "-m", signed.manifest])
        #expect(stock.status == 0, "minisign -V: \(stock.stdout)\(stock.stderr)")
        #expect(stock.stdout.contains("Signature and comment signature verified"))
        try await signed.sync(trusting: [signed.key("release") + ".pub"]).checked("sync --trust-key release.pub")
    }

    @Test func keygenWritesAPrivateSecretKeyAndNeverOverwritesIt() async throws {
        let signed = try await SignedRepository()
        let secret = signed.key("release") + ".key"
        let publicKey = signed.key("release") + ".pub"
        var info = stat()
        #expect(stat(secret, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600, "mode \(String(info.st_mode & 0o777, radix: 8))")
        #expect(FileManager.default.fileExists(atPath: publicKey))
        let before = try [secret, publicKey].map { try Data(contentsOf: URL(fileURLWithPath: $0)) }

        let again = try await signed.keygen("release")
        #expect(again.status == 2)
        #expect(again.stderr.contains("\(secret) already exists"))
        #expect(try [secret, publicKey].map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == before)
    }

    @Test func anyOfSeveralTrustKeysMaySign() async throws {
        let signed = try await SignedRepository()
        try await signed.sync(trusting: [signed.key("other") + ".pub", signed.key("release") + ".pub"])
            .checked("sync --trust-key other.pub --trust-key release.pub")
    }

    @Test func aFileWithOnlyTheBase64LineIsATrustKey() async throws {
        let signed = try await SignedRepository()
        let text = try String(contentsOfFile: signed.key("release") + ".pub", encoding: .utf8)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 2)
        let bare = try signed.directory.write(String(lines[1]) + "\n", to: "release-line.pub")
        try await signed.sync(trusting: [bare]).checked("sync --trust-key release-line.pub")
    }

    @Test func anUntrustedSignerIsRefusedAndTheActiveSetStays() async throws {
        let signed = try await SignedRepository()
        try await signed.sync(trusting: [signed.key("release") + ".pub"]).checked("first sync")
        let active = try Data(contentsOf: URL(fileURLWithPath: signed.activeSet))
        try await signed.publish(version: "2")

        let refused = try await signed.sync(trusting: [signed.key("other") + ".pub"])
        #expect(refused.status == 4)
        #expect(
            refused.stderr.contains("signed by key \(try signed.keyID("release")), which is not trusted"), "\(refused.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: signed.activeSet)) == active)
    }
}
