import Foundation
import OfflinePkg
import OfflinePkgCLI
import Synchronization

/// Runs the `offlinepkg` command line in this process, as the binary runs it (`OfflinePkgCommand`),
/// with its output captured instead of written to this process's stdout and stderr. The environment is
/// this process's unless `environment` is given, as a child's would be. What a test reads from a
/// command (its exit status, stdout, stderr) comes through here; a test runs the binary
/// (`OfflinePkgBinary`) only where a process is the point: kill -9, a lock or lease held by another
/// process, a signal, another user, `serve`, a fail point.
public enum InProcessCLI {
    public static func run(_ arguments: [String], environment: [String: String]? = nil) async -> ProcessResult {
        await run(arguments, environment: environment, world: .live)
    }

    /// The same with the clock and network of `world`.
    package static func run(_ arguments: [String], environment: [String: String]? = nil, world: World) async -> ProcessResult {
        let stdout = Mutex("")
        let stderr = Mutex("")
        let sink = OutputSink(
            standardOutput: { text in stdout.withLock { $0 += text } },
            standardError: { text in stderr.withLock { $0 += text } })
        let context = CLIContext(
            environment: environment ?? ProcessInfo.processInfo.environment, output: Output(sink: sink), world: world)
        let status = await OfflinePkgCommand.run(arguments, context: context)
        return ProcessResult(status: status, stdout: stdout.withLock { $0 }, stderr: stderr.withLock { $0 })
    }
}
