import Foundation

/// `offlinepkg` run under `strace -f` (every thread), for tests that check which system calls a command
/// makes: their order, the threads that made them, or how many touch a folder. The trace goes to a file
/// of its own, so the command's stderr stays its own.
public enum Strace {
    /// What the run printed and the traced calls, one line each (`[pid N] call(...) = result` for the
    /// threads after the first).
    public struct Run: Sendable {
        public var result: ProcessResult
        public var calls: [String]

        /// The calls (not their "resumed" halves) whose line contains `text`.
        public func calls(containing text: String) -> [String] {
            calls.filter { $0.contains(text) && !$0.contains("resumed>") }
        }
    }

    /// Every call that stats a file, on x86_64 and arm64 alike (`%stat` alone is only the old `stat`;
    /// glibc's `stat`/`lstat` are `newfstatat` or `statx`).
    public static let statCalls = "%stat,%lstat,%fstat,newfstatat,statx"

    /// Runs `offlinepkg arguments` under strace tracing `trace` (an `-e trace=` value such as
    /// `openat` or `%stat`); `flags` adds strace options such as `-y`. Requires strace (make deps).
    public static func offlinepkg(
        _ arguments: [String], trace: String, flags: [String] = [], environment: [String: String] = [:], timeout: Double = 120
    ) throws -> Run {
        guard let strace = which("strace") else { throw TestSupportError("strace is needed (make deps installs it)") }
        let scratch = try TemporaryDirectory(prefix: "strace")
        let output = scratch.path("trace")
        let result = try run(
            strace, ["-f", "-qq", "-o", output] + flags + ["-e", "trace=" + trace, OfflinePkgBinary.path] + arguments,
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 }, timeout: timeout)
        let text = String(decoding: FileManager.default.contents(atPath: output) ?? Data(), as: UTF8.self)
        return Run(result: result, calls: text.split(separator: "\n").map(String.init))
    }
}
