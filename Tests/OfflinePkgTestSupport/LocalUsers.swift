import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Two users on one device (STYLE.md, "Two users on one device"): the shell's own user, `nobody`, and a
/// hostile neighbour, `opk-b`, a system user made on first use (`useradd --system`, idempotent). Commands
/// run as either through `setpriv`, which needs this process to be root: the suites that use these
/// are enabled only then (CI runs as root).
public enum LocalUser: String, Sendable, CaseIterable {
    /// The user the shell and `serve` run as.
    case shell = "nobody"
    /// Another user of the device: another app's uid, a kiosk's second account.
    case hostile = "opk-b"

    /// Whether this process can act as either user.
    public static var available: Bool { getuid() == 0 && which("setpriv") != nil }

    public var name: String { rawValue }

    /// The user's uid and primary gid, making `opk-b` first when it is missing.
    public func ids() throws -> (uid: uid_t, gid: gid_t) {
        if let entry = getpwnam(name) { return (entry.pointee.pw_uid, entry.pointee.pw_gid) }
        guard self == .hostile else { throw TestSupportError("user \(name) does not exist") }
        // Tests of this process that run side by side take turns: a second useradd while the first holds
        // /etc/passwd's lock fails (10) rather than waiting. Another process (another engineer's run) may
        // make it at the same moment: "already exists" (9) is as good as made.
        let made = try userCreation.withLock { _ in
            if getpwnam(name) != nil { return ProcessResult(status: 0, stdout: "", stderr: "") }
            return try OfflinePkgTestSupport.run(
                "useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
        }
        guard made.status == 0 || made.status == 9 else { throw TestSupportError("useradd \(name): \(made.stderr)") }
        guard let entry = getpwnam(name) else { throw TestSupportError("user \(name) missing after useradd") }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// `command` prefixed so that it runs as this user, its own group only.
    public func command(_ command: [String]) throws -> [String] {
        let (uid, gid) = try ids()
        return [try requireTool("setpriv"), "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups"] + command
    }

    /// Runs `command` as this user to completion. It starts in `/`, as another user's process would:
    /// the checkout the tests run from may be a folder only its owner can enter.
    public func run(_ command: [String], environment: [String: String]? = nil, timeout: Double = 60) throws -> ProcessResult {
        let full = try self.command(command)
        return try OfflinePkgTestSupport.run(
            full[0], Array(full.dropFirst()), environment: environment, currentDirectory: "/", timeout: timeout)
    }

    /// Starts `command` as this user, in `/`, and leaves it running.
    public func start(_ command: [String], environment: [String: String]? = nil) throws -> ChildProcess {
        let full = try self.command(command)
        return try ChildProcess(full[0], Array(full.dropFirst()), environment: environment, currentDirectory: "/")
    }

    /// Gives `path` (not following a link) to this user.
    public func own(_ path: String) throws {
        let (uid, gid) = try ids()
        guard lchown(path, uid, gid) == 0 else { throw TestSupportError("chown \(path) to \(name): errno \(errno)") }
    }
}

/// Held while this process makes a user (`LocalUser.ids`).
private let userCreation = Mutex(())

private func requireTool(_ name: String) throws -> String {
    guard let path = which(name) else { throw TestSupportError("\(name): not installed") }
    return path
}
