import Foundation
import OfflinePkg
import OfflinePkgServer
import OfflinePkgTestSupport

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
}

/// The outcome of running a tool to completion.
struct ToolResult: Sendable {
    var status: Int32
    var stdout: String
    var stderr: String
}

enum Tool {
    /// Runs `tool` with `arguments`, killing its whole process group after `timeout` seconds, and
    /// again once it exits, so nothing it spawned (Chromium's helpers) outlives the test. Output goes
    /// to files, not pipes: a helper that keeps a pipe open cannot stall the read.
    static func run(_ tool: String, _ arguments: [String], timeout: TimeInterval = 30) throws -> ToolResult {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-tool")
        for name in ["out", "err"] {
            guard FileManager.default.createFile(atPath: scratch.path(name), contents: nil) else {
                throw TestSupportError("cannot create \(scratch.path(name))")
            }
        }
        let process = Process()
        // Foundation starts the child as the leader of a new process group (pgid = pid), so one
        // kill(-pid) ends it and every helper it spawned that kept the group.
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: scratch.path("out")))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: scratch.path("err")))
        try process.run()
        let group = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(-group, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
        process.waitUntilExit()
        watchdog.cancel()
        kill(-group, SIGKILL)
        return ToolResult(
            status: process.terminationStatus,
            stdout: (try? String(contentsOfFile: scratch.path("out"), encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: scratch.path("err"), encoding: .utf8)) ?? "")
    }

    /// curl with `arguments`; stdout holds what `-D -`/`-w` print.
    static func curl(_ arguments: [String]) throws -> ToolResult {
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
