import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The committed demo repository (Fixtures/demo-repo), found relative to this file.
let demoManifest = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/demo-repo/manifest.json")

/// A root with the demo set installed through the real sync path, and a server on a free port.
final class ServedDemo: Sendable {
    let scratch: TemporaryDirectory
    let store: PackageStore
    let server: LoopbackServer

    init(watchInterval: TimeInterval = 0.5, threadModel: LoopbackServer.ThreadModel = .standard) async throws {
        scratch = try TemporaryDirectory()
        store = try PackageStore(root: URL(fileURLWithPath: scratch.path("root")), options: .init(watchInterval: watchInterval))
        _ = try await Updater(store: store, manifestURL: demoManifest).sync()
        server = try LoopbackServer(store: store, port: 0, threadModel: threadModel)
        try server.start()
    }

    deinit { server.stop() }

    var base: String { server.url.absoluteString }
    var port: UInt16 { server.port }

    /// The demo a suite with the `.sharedDemo` trait shares between its tests (which must only read).
    @TaskLocal static var current: ServedDemo?

    static func shared() throws -> ServedDemo {
        guard let current else { throw TestSupportError("ServedDemo.shared() outside a suite with the .sharedDemo trait") }
        return current
    }
}

/// One demo root and server for the read-only tests of a suite: synced and started once before its first
/// test, stopped after its last, instead of once per test.
struct SharedDemoTrait: SuiteTrait, TestScoping {
    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let demo = try await ServedDemo()
        try await ServedDemo.$current.withValue(demo) { try await function() }
    }
}

extension Trait where Self == SharedDemoTrait {
    static var sharedDemo: Self { Self() }
}

enum Tool {
    /// curl with `arguments`; stdout holds what `-D -`/`-w` print.
    static func curl(_ arguments: [String]) throws -> ProcessResult {
        try run("/usr/bin/curl", ["-sS", "--max-time", "10"] + arguments, timeout: 20)
    }
}

/// Parses `curl -D -` output: status code, lowercase header names, and the body after the blank line.
struct HTTPReply {
    var status: Int
    var headers: [String: String]
    var body: String

    init(_ text: String) {
        var headers = [String: String]()
        var status = 0
        let parts = text.components(separatedBy: "\r\n\r\n")
        for line in parts[0].components(separatedBy: "\r\n") {
            if line.hasPrefix("HTTP/") {
                status = Int(line.split(separator: " ")[1]) ?? 0
            } else if let colon = line.firstIndex(of: ":") {
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        self.status = status
        self.headers = headers
        self.body = parts.dropFirst().joined(separator: "\r\n\r\n")
    }
}
