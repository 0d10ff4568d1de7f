import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A child started with `posix_spawn` and reaped with `waitpid`, for `ChildProcess` and `NginxServer`.
///
/// Not Foundation's `Process`: on Linux it learns that a child exited from one end of a socket pair
/// the child inherits, and reaps it with a blocking `waitpid` on one thread for the whole process.
/// With tests side by side, that thread was seen blocked in `waitpid` on a live nginx of another
/// test after a callback meant for an exited child; every other child's exit then went unseen and
/// the tests waiting on them never ended. Here each child is polled with `WNOHANG` by whoever waits
/// for it. The child leads a process group of its own (one `kill(-pid)` ends what it spawned), starts
/// with the calling thread's signal mask as `Process` gave it, and inherits no descriptor but its
/// standard input, output and error: every other one of this process is close-on-exec by then.
package final class SpawnedProcess: Sendable {
    let pid: pid_t
    /// The `waitpid` status once reaped.
    private let reaped = Mutex<Int32?>(nil)

    /// Starts `executable` (a path) with `arguments`; `environment` replaces this process's when given.
    /// Standard input is `/dev/null`; `output` and `error` are descriptors the child gets as 1 and 2.
    init(
        _ executable: String, _ arguments: [String], environment: [String: String]?, currentDirectory: String?,
        output: Int32, error: Int32
    ) throws {
        // A folder to start in, through the shell: glibc's posix_spawn_file_actions_addchdir_np is not
        // visible from Swift.
        var argv = [executable] + arguments
        var path = executable
        if let currentDirectory {
            path = "/bin/sh"
            argv = ["/bin/sh", "-c", "cd -- \"$0\" && exec \"$@\"", currentDirectory] + argv
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, error, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        let cEnvironment = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer { for entry in cEnvironment ?? [] { free(entry) } }
        var child: pid_t = 0
        let status = startingAlone {
            Self.closeOnExecEverything()
            return cArguments.withUnsafeBufferPointer { argvPointer in
                let argvBase = UnsafePointer(argvPointer.baseAddress!)
                if let cEnvironment {
                    return cEnvironment.withUnsafeBufferPointer { envPointer in
                        posix_spawn(&child, path, &actions, &attributes, argvBase, UnsafePointer(envPointer.baseAddress!))
                    }
                }
                return posix_spawn(&child, path, &actions, &attributes, argvBase, environ)
            }
        }
        guard status == 0 else { throw TestSupportError("posix_spawn \(executable): \(String(cString: strerror(status)))") }
        pid = child
    }

    /// Marks every descriptor of this process past standard error close-on-exec, so a child inherits
    /// only what its spawn's actions give it (a socket or lock another test holds open would otherwise
    /// live on in an nginx started beside it).
    package static func closeOnExecEverything() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for name in names {
            guard let fd = Int32(name), fd > 2 else { continue }
            let flags = fcntl(fd, F_GETFD)
            if flags >= 0 && flags & FD_CLOEXEC == 0 { _ = fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
        }
    }

    /// Whether the child still runs (reaping it, without waiting, if it has exited).
    var isRunning: Bool {
        reaped.withLock { status in
            if status != nil { return false }
            var value: Int32 = 0
            let result = waitpid(pid, &value, WNOHANG)
            if result == pid || (result < 0 && errno == ECHILD) {
                status = result == pid ? value : 0
                return false
            }
            return true
        }
    }

    /// Waits until the child has exited, polling.
    func waitUntilExit() {
        while isRunning { usleep(2_000) }
    }

    /// Whether a signal ended the child; valid once it has exited.
    var endedBySignal: Bool { reaped.withLock { $0.map { ($0 & 0x7f) != 0 && ($0 & 0x7f) != 0x7f } ?? false } }

    /// The exit status, or the number of the signal that ended the child; valid once it has exited.
    var code: Int32 {
        reaped.withLock { status in
            guard let status else { return -1 }
            return (status & 0x7f) == 0 ? (status >> 8) & 0xff : status & 0x7f
        }
    }
}
