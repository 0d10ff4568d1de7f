import Foundation
import OfflinePkgTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands
/// on fd 3, replies on fd 4, each message ending in a NUL byte), so a test can wait for what a page's
/// asynchronous script reports (service worker, `fetch`, fonts) and reload it, which `--dump-dom`
/// (a snapshot at the load event) cannot.
final class DevToolsBrowser {
    private let pid: pid_t
    private let commands: FileHandle
    private let replies: Int32
    private var buffer = [UInt8]()
    private var nextID = 0
    private var session: String?
    let profile: TemporaryDirectory

    init(_ chromium: String, arguments: [String], url: String) throws {
        profile = try TemporaryDirectory(prefix: "offlinepkg-chromium")
        var toBrowser: [Int32] = [0, 0]
        var fromBrowser: [Int32] = [0, 0]
        // Close-on-exec before any other child can start, so none inherits them (a writer it kept would
        // hold the browser's pipe open); the dup2s below give the browser its own copies.
        let made = startingAlone {
            guard pipe(&toBrowser) == 0, pipe(&fromBrowser) == 0 else { return false }
            for fd in toBrowser + fromBrowser { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            return true
        }
        guard made else { throw TestSupportError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toBrowser[0], 3)
        posix_spawn_file_actions_adddup2(&actions, fromBrowser[1], 4)
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        posix_spawn_file_actions_adddup2(&actions, null, 1)
        posix_spawn_file_actions_adddup2(&actions, null, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, so one kill(-pid) ends every helper it starts.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        let argv =
            [
                chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
                "--user-data-dir=\(profile.path)",
            ] + arguments + [url]
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        var child: pid_t = 0
        let status = startingAlone {
            SpawnedProcess.closeOnExecEverything()
            return posix_spawn(&child, chromium, &actions, &attributes, &cArguments, environ)
        }
        close(toBrowser[0])
        close(fromBrowser[1])
        close(null)
        guard status == 0 else { throw TestSupportError("posix_spawn \(chromium): \(String(cString: strerror(status)))") }
        pid = child
        commands = FileHandle(fileDescriptor: toBrowser[1], closeOnDealloc: true)
        replies = fromBrowser[0]
        try attach()
    }

    deinit {
        kill(-pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        close(replies)
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value as JSON text.
    func evaluate(_ expression: String, timeout: TimeInterval = 10) throws -> Any? {
        let reply = try call(
            "Runtime.evaluate", ["expression": expression, "awaitPromise": true, "returnByValue": true], session: session,
            timeout: timeout)
        return ((reply["result"] as? [String: Any])?["result"] as? [String: Any])?["value"]
    }

    /// Polls `expression` until it gives a value `accept` takes, or `timeout` passes; returns the last value.
    func wait(for expression: String, timeout: TimeInterval = 15, until accept: (Any?) -> Bool) throws -> Any? {
        let deadline = Date().addingTimeInterval(timeout)
        var value: Any?
        repeat {
            value = try? evaluate(expression)
            if accept(value) { return value }
            usleep(100_000)
        } while Date() < deadline
        return value
    }

    func reload() throws { _ = try call("Page.reload", ["ignoreCache": false], session: session) }

    private func attach() throws {
        // The URL given on the command line opens one page target.
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let targets = try call("Target.getTargets", [:], session: nil)
            let infos = (targets["result"] as? [String: Any])?["targetInfos"] as? [[String: Any]] ?? []
            if let page = infos.first(where: { $0["type"] as? String == "page" }), let id = page["targetId"] as? String {
                let attached = try call("Target.attachToTarget", ["targetId": id, "flatten": true], session: nil)
                session = (attached["result"] as? [String: Any])?["sessionId"] as? String
                if session != nil { return }
            }
            usleep(100_000)
        }
        throw TestSupportError("chromium opened no page target within 20 s")
    }

    private func call(_ method: String, _ parameters: [String: Any], session: String?, timeout: TimeInterval = 10) throws
        -> [String: Any]
    {
        nextID += 1
        let id = nextID
        var message: [String: Any] = ["id": id, "method": method, "params": parameters]
        if let session { message["sessionId"] = session }
        commands.write(try JSONSerialization.data(withJSONObject: message) + [0])
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard let text = try readMessage(until: deadline) else { break }
            if let object = try? JSONSerialization.jsonObject(with: text) as? [String: Any], object["id"] as? Int == id {
                if let error = object["error"] { throw TestSupportError("\(method): \(error)") }
                return object
            }
        }
        throw TestSupportError("\(method): no reply within \(timeout) s")
    }

    /// One NUL-terminated message from the browser, or nil at the deadline or end of file.
    private func readMessage(until deadline: Date) throws -> Data? {
        while true {
            if let end = buffer.firstIndex(of: 0) {
                let message = Data(buffer[..<end])
                buffer.removeSubrange(...end)
                return message
            }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { return nil }
            var poller = pollfd(fd: replies, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, Int32(remaining * 1000)) > 0 else { return nil }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = read(replies, &chunk, chunk.count)
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
    }
}
