import Foundation

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
/// of hanging the run.
public func run(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    currentDirectory: String? = nil, timeout: Double = 60
) throws -> ProcessResult {
    guard let resolved = executable.contains("/") ? executable : which(executable) else {
        throw TestSupportError("\(executable): not found in PATH")
    }
    let scratch = try TemporaryDirectory(prefix: "offlinepkg-run")
    let stdoutPath = scratch.path("stdout")
    let stderrPath = scratch.path("stderr")
    _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
    _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
    guard let stdoutHandle = FileHandle(forWritingAtPath: stdoutPath),
        let stderrHandle = FileHandle(forWritingAtPath: stderrPath)
    else { throw TestSupportError("cannot open output files in \(scratch.path)") }

    let process = Process()
    process.executableURL = URL(fileURLWithPath: resolved)
    process.arguments = arguments
    if let environment { process.environment = environment }
    if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = stdoutHandle
    process.standardError = stderrHandle
    try process.run()
    try? stdoutHandle.close()
    try? stderrHandle.close()

    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(2_000) }
    if process.isRunning {
        kill(process.processIdentifier, SIGKILL)
    }
    process.waitUntilExit()

    let status =
        process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    let out = FileManager.default.contents(atPath: stdoutPath) ?? Data()
    let err = FileManager.default.contents(atPath: stderrPath) ?? Data()
    return ProcessResult(
        status: status, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
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
