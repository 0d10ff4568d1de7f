import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What a finished child process left behind.
public struct ProcessResult: Sendable, Equatable {
    /// The exit status, or 128 + the signal number when a signal ended the process (as shells report it).
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }

    /// Returns `self` when the process exited 0, and throws with its stderr otherwise.
    @discardableResult
    public func checked(_ what: String = "command") throws -> ProcessResult {
        guard status == 0 else { throw TestSupportError("\(what) exited \(status): \(stderr)") }
        return self
    }
}

/// Runs `executable` (a path, or a name looked up with `which`) to completion and captures its output.
///
/// Output goes to temporary files rather than pipes: a child that fills one pipe while we block
/// reading the other can never deadlock us, and a child that leaves a daemon holding its stdout
/// open cannot keep us waiting for end-of-file. Standard input is `/dev/null`. A child still
/// running after `timeout` seconds is killed (status 128 + 9), so a hung tool fails a test instead
/// of hanging the run. With `killingGroup`, the kill goes to the child's whole process group, also
/// once it has exited, so that nothing it spawned (Chromium's helpers) outlives the call.
public func run(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    currentDirectory: String? = nil, timeout: Double = 60, killingGroup: Bool = false
) throws -> ProcessResult {
    try ChildProcess(executable, arguments, environment: environment, currentDirectory: currentDirectory)
        .wait(timeout: timeout, killingGroup: killingGroup)
}

/// Runs `script` with `bash -euo pipefail`, the environment being this process's plus `environment`;
/// returns its stdout, and throws with its stderr when it exits non-zero.
@discardableResult
public func shell(_ script: String, environment: [String: String] = [:], timeout: Double = 60) throws -> String {
    let merged = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let result = try run("bash", ["-euo", "pipefail", "-c", script], environment: merged, timeout: timeout)
    guard result.status == 0 else {
        throw TestSupportError("bash exited \(result.status): \(result.stderr)\nscript: \(script)")
    }
    return result.stdout
}

/// Runs `start`, which starts a child process, while no other test of this process starts one: what
/// is made inheritable for one child (its descriptors, a pipe's end) is never open while another starts.
package func startingAlone<T>(_ start: () throws -> T) rethrows -> T {
    try childStarts.withLock { _ in try start() }
}

private let childStarts = Mutex(())

/// A child process left running while a test works beside it (a sync to kill, a reader to freeze, a
/// server), with its output in files as `run` keeps it. Killed with SIGKILL on deinit if still running.
public final class ChildProcess: @unchecked Sendable {
    // Only the test that started it touches it.
    private let process: SpawnedProcess
    private let scratch: TemporaryDirectory

    /// Starts `executable` (a path, or a name looked up with `which`). `environment` replaces this
    /// process's when given; standard input is `/dev/null`.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, currentDirectory: String? = nil
    ) throws {
        guard let resolved = executable.contains("/") ? executable : which(executable) else {
            throw TestSupportError("\(executable): not found in PATH")
        }
        scratch = try TemporaryDirectory(prefix: "offlinepkg-run")
        _ = FileManager.default.createFile(atPath: scratch.path("stdout"), contents: nil)
        _ = FileManager.default.createFile(atPath: scratch.path("stderr"), contents: nil)
        guard let stdoutHandle = FileHandle(forWritingAtPath: scratch.path("stdout")),
            let stderrHandle = FileHandle(forWritingAtPath: scratch.path("stderr"))
        else { throw TestSupportError("cannot open output files in \(scratch.path)") }
        defer {
            try? stdoutHandle.close()
            try? stderrHandle.close()
        }
        // The child leads a process group of its own (pgid = pid), so one kill(-pid) ends it and every
        // helper it spawned that kept the group.
        process = try SpawnedProcess(
            resolved, arguments, environment: environment, currentDirectory: currentDirectory,
            output: stdoutHandle.fileDescriptor, error: stderrHandle.fileDescriptor)
    }

    deinit {
        if process.isRunning { Glibc.kill(process.pid, SIGKILL) }
        process.waitUntilExit()
    }

    public var pid: pid_t { process.pid }
    public var isRunning: Bool { process.isRunning }
    /// Whether a signal ended the child (rather than an exit of its own, perhaps with 128 + N); valid
    /// once it has exited.
    public var endedBySignal: Bool { !process.isRunning && process.endedBySignal }

    /// What the child wrote to stdout so far.
    public var stdout: String { String(decoding: FileManager.default.contents(atPath: scratch.path("stdout")) ?? Data(), as: UTF8.self) }
    /// What the child wrote to stderr so far.
    public var stderr: String { String(decoding: FileManager.default.contents(atPath: scratch.path("stderr")) ?? Data(), as: UTF8.self) }

    /// The first line the child printed on stdout (without its newline), waiting for it at most
    /// `timeout` seconds; nil if the child exited or the time ran out first.
    public func firstLine(timeout: Double = 10) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let text = stdout
            if let newline = text.firstIndex(of: "\n") { return String(text[..<newline]) }
            if !process.isRunning { return nil }
            usleep(2_000)
        }
        return nil
    }

    /// Sends `signal` to the child (SIGSTOP, SIGTERM, ...), if it still runs.
    public func signal(_ signal: Int32) {
        if process.isRunning { Glibc.kill(process.pid, signal) }
    }

    /// SIGKILL, and waits until the child is gone; returns what it left.
    @discardableResult
    public func kill() -> ProcessResult {
        signal(SIGKILL)
        return wait()
    }

    /// Waits for the child to exit, killing it (or with `killingGroup` its process group) after
    /// `timeout` seconds. The status is 128 + the signal number when a signal ended it.
    @discardableResult
    public func wait(timeout: Double? = nil, killingGroup: Bool = false) -> ProcessResult {
        let deadline = timeout.map { Date().addingTimeInterval($0) } ?? .distantFuture
        while process.isRunning && Date() < deadline { usleep(2_000) }
        if process.isRunning { Glibc.kill(killingGroup ? -process.pid : process.pid, SIGKILL) }
        process.waitUntilExit()
        if killingGroup { Glibc.kill(-process.pid, SIGKILL) }
        let status = process.endedBySignal ? 128 + process.code : process.code
        return ProcessResult(status: status, stdout: stdout, stderr: stderr)
    }
}

/// The absolute path of the executable `name` in `PATH` (plus `/usr/sbin` and `/sbin`, where
/// Debian puts `nginx` even when a non-root `PATH` leaves them out), or nil.
public func which(_ name: String) -> String? {
    let searchPath = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    let directories = searchPath.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin"]
    for directory in directories {
        let candidate = "\(directory)/\(name)"
        var info = stat()
        if stat(candidate, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, access(candidate, X_OK) == 0 {
            return candidate
        }
    }
    return nil
}
