import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One line of an `NginxServer` access log. Header fields are nil when the request did not send them.
public struct AccessLogEntry: Sendable, Equatable {
    public var method: String
    /// The normalised, percent-decoded path nginx matched (`$uri`).
    public var uri: String
    /// The request target as sent, query included (`$request_uri`).
    public var requestURI: String
    public var status: Int
    /// Bytes of body sent (`$body_bytes_sent`): what a test counts to see how much a download fetched.
    public var bodyBytesSent: Int
    /// Bytes sent in all, headers included (`$bytes_sent`).
    public var bytesSent: Int
    public var range: String?
    public var ifRange: String?
    public var ifNoneMatch: String?
    public var ifModifiedSince: String?
    /// `HTTP/1.1` or `HTTP/2.0` (`$server_protocol`).
    public var serverProtocol: String? = nil
    /// nginx's serial number of the connection the request came on (`$connection`): requests with the
    /// same number shared one connection.
    public var connection: Int? = nil
}

/// The Debian `nginx` serving a folder on 127.0.0.1, the way a publisher's static server or CDN
/// would: real ETags, ranges, MIME types, sendfile. Each instance has its own prefix folder (config,
/// pid file, logs, temp paths), so tests run it in parallel. Stopped by `stop()` or on deinit.
public final class NginxServer: Sendable {
    /// `http://127.0.0.1:PORT/`.
    public let baseURL: URL
    public let port: Int
    public let documentRoot: String
    /// The folder holding the generated config, the logs and nginx's temp paths.
    public let prefix: TemporaryDirectory
    private let process: Mutex<SpawnedProcess?>
    /// The config for a given `locations` text, everything else as started.
    private let configuration: @Sendable (String) -> String

    /// Starts nginx serving `documentRoot`.
    /// - Parameters:
    ///   - limitRate: bytes per second per connection (`limit_rate`), for slow downloads. nginx lets
    ///     the first second's worth through at once, so a body of `2 * limitRate` takes about 1 s.
    ///   - locations: raw config appended inside the `server` block (`location` blocks and the like).
    ///     The server has no `location /` of its own, so a test may add one.
    ///   - tls: serve https with a fresh self-signed certificate for 127.0.0.1 (`certificatePath`).
    ///   - http: raw config for the `http` block (`proxy_cache_path`, `map`, ...), e.g. for a caching edge;
    ///     `PREFIX` in it stands for this server's prefix folder.
    ///   - authority: serve https with a certificate for 127.0.0.1 that this test CA issues (the client
    ///     trusts `authority.certificatePath`), instead of a self-signed one.
    ///   - authorityNames: the subjectAltName of that certificate, e.g. `DNS:api.private.test` for a host
    ///     a test resolves to this server.
    ///   - http2: offer HTTP/2 (ALPN `h2`) on the https listener.
    public init(
        documentRoot: String, limitRate: Int? = nil, locations: String = "", tls: Bool = false, http: String = "",
        authority: TestCertificateAuthority? = nil, authorityNames: String = TestCertificateAuthority.loopbackNames,
        http2: Bool = false
    ) throws {
        guard let nginx = which("nginx") else { throw TestSupportError("nginx: not installed") }
        self.documentRoot = documentRoot
        prefix = try TemporaryDirectory(prefix: "offlinepkg-nginx")
        let tls = tls || authority != nil
        var tlsConfig = ""
        if let authority {
            try authority.issueServerCertificate(
                key: prefix.path("tls.key"), certificate: prefix.path("tls.crt"), names: authorityNames)
            tlsConfig = "ssl_certificate \"\(prefix.path("tls.crt"))\"; ssl_certificate_key \"\(prefix.path("tls.key"))\";"
        } else if tls {
            try run(
                "openssl",
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", prefix.path("tls.key"), "-out", prefix.path("tls.crt"),
                ]
            ).checked("openssl req")
            tlsConfig = "ssl_certificate \"\(prefix.path("tls.crt"))\"; ssl_certificate_key \"\(prefix.path("tls.key"))\";"
        }
        let prefixPath = prefix.path
        let header = tlsConfig
        for attempt in 1...20 {
            let candidate = Int.random(in: 20000...60000)
            guard Self.portLooksFree(candidate) else { continue }
            let configuration: @Sendable (String) -> String = { locations in
                Self.config(
                    prefix: prefixPath, port: candidate, root: documentRoot, limitRate: limitRate,
                    locations: header + "\n" + locations, ssl: tls, http2: http2,
                    http: http.replacingOccurrences(of: "PREFIX", with: prefixPath))
            }
            try prefix.write(configuration(locations), to: "nginx.conf")
            let started = try Self.launch(nginx, prefix: prefix.path)
            if try Self.waitUntilServing(started, prefix: prefix.path, port: candidate) {
                port = candidate
                baseURL = URL(string: "\(tls ? "https" : "http")://127.0.0.1:\(candidate)/")!
                process = Mutex(started)
                self.configuration = configuration
                return
            }
            // Lost a race for the port to another test (nginx exits on EADDRINUSE): pick another.
            let errors = (try? String(contentsOfFile: prefix.path("error.log"), encoding: .utf8)) ?? ""
            guard errors.contains("Address already in use"), attempt < 20 else {
                throw TestSupportError("nginx did not start on port \(candidate): \(errors)")
            }
            try? FileManager.default.removeItem(atPath: prefix.path("error.log"))
        }
        throw TestSupportError("nginx: no free port found in 20 attempts")
    }

    deinit { stop() }

    /// The URL of `path` (relative, no leading slash) on this server.
    public func url(_ path: String) -> URL { URL(string: path, relativeTo: baseURL)!.absoluteURL }

    /// Serves on with another `locations` config, on the same port: the master re-reads its config
    /// (SIGHUP), starts new workers and lets the old ones finish. Returns once no old worker is left.
    public func reload(locations: String) throws {
        try prefix.write(configuration(locations), to: "nginx.conf")
        guard let master = masterPID else { throw TestSupportError("nginx is not running") }
        let before = Set(childProcesses(of: master))
        kill(master, SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let now = Set(childProcesses(of: master).filter(processIsAlive))
            if !now.isEmpty && now.isDisjoint(with: before) { return }
            usleep(10_000)
        }
        throw TestSupportError("nginx did not reload within 10 s: \(errorLog())")
    }

    /// The pid of the nginx master process, while it runs.
    public var masterPID: pid_t? { process.withLock { $0.map(\.pid) } }

    /// Stops nginx (fast shutdown: SIGTERM, which also ends workers mid-transfer) and waits for it.
    /// A master that does not exit within 5 s is killed with its workers. Safe to call more than once.
    public func stop() {
        guard
            let running = process.withLock({ value -> SpawnedProcess? in
                defer { value = nil }
                return value
            })
        else { return }
        let master = running.pid
        kill(master, SIGTERM)
        let deadline = Date().addingTimeInterval(5)
        while running.isRunning && Date() < deadline { usleep(5_000) }
        if running.isRunning {
            for worker in childProcesses(of: master) { kill(worker, SIGKILL) }
            kill(master, SIGKILL)
        }
        running.waitUntilExit()
    }

    /// Every request logged so far, oldest first. nginx writes a line when a request finishes, a
    /// moment after the client may already have its last byte: use `waitForRequests` to be exact.
    public func accessLog() -> [AccessLogEntry] {
        guard let text = try? String(contentsOfFile: prefix.path("access.log"), encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap(Self.parseLogLine)
    }

    /// How many logged requests asked for `path` (matched against `$uri`; a leading `/` is optional).
    public func requestCount(path: String) -> Int {
        let wanted = path.hasPrefix("/") ? path : "/" + path
        return accessLog().filter { $0.uri == wanted }.count
    }

    /// Waits until the access log holds at least `count` lines; returns the log either way.
    @discardableResult
    public func waitForRequests(_ count: Int, timeout: Double = 2) -> [AccessLogEntry] {
        let deadline = Date().addingTimeInterval(timeout)
        var entries = accessLog()
        while entries.count < count && Date() < deadline {
            usleep(5_000)
            entries = accessLog()
        }
        return entries
    }

    /// What nginx wrote to its error log (startup problems, aborted transfers).
    public func errorLog() -> String {
        (try? String(contentsOfFile: prefix.path("error.log"), encoding: .utf8)) ?? ""
    }

    // MARK: - Starting

    // Tab-separated (nginx escapes a tab inside a value as \x09), "-" for an absent header.
    private static let logFields =
        "$request_method\\t$uri\\t$request_uri\\t$status\\t$body_bytes_sent\\t$bytes_sent\\t"
        + "$http_range\\t$http_if_range\\t$http_if_none_match\\t$http_if_modified_since\\t$server_protocol\\t$connection"

    /// The self-signed certificate of a `tls` server, to trust in the client under test.
    public var certificatePath: String { prefix.path("tls.crt") }

    private static func config(
        prefix: String, port: Int, root: String, limitRate: Int?, locations: String, ssl: Bool, http2: Bool = false,
        http: String
    ) -> String {
        // A root master hands requests to workers running as `nobody`, who cannot enter the 0700
        // folders mkdtemp makes. Tests own their files, so the workers stay root. A non-root master
        // cannot switch users and would only warn about the directive, so it is left out.
        let user = geteuid() == 0 ? "user root root;" : ""
        return """
            \(user)
            daemon off;
            master_process on;
            worker_processes 1;
            pid "\(prefix)/nginx.pid";
            lock_file "\(prefix)/nginx.lock";
            error_log "\(prefix)/error.log" warn;
            events { worker_connections 256; }
            http {
                include /etc/nginx/mime.types;
                default_type application/octet-stream;
                log_format offlinepkg '\(logFields)';
                access_log "\(prefix)/access.log" offlinepkg;
                client_body_temp_path "\(prefix)/client_body";
                proxy_temp_path "\(prefix)/proxy";
                fastcgi_temp_path "\(prefix)/fastcgi";
                uwsgi_temp_path "\(prefix)/uwsgi";
                scgi_temp_path "\(prefix)/scgi";
                sendfile on;
                etag on;
                keepalive_timeout 5s;
                \(http)
                server {
                    listen 127.0.0.1:\(port)\(ssl ? " ssl" : "")\(http2 ? " http2" : "");
                    server_name localhost;
                    root "\(root)";
                    \(limitRate.map { "limit_rate \($0);" } ?? "")
                    \(locations)
                }
            }

            """
    }

    private static func launch(_ nginx: String, prefix: String) throws -> SpawnedProcess {
        // A file, not a pipe: nobody drains a pipe while nginx runs.
        _ = FileManager.default.createFile(atPath: prefix + "/stdio.log", contents: nil)
        guard let output = FileHandle(forWritingAtPath: prefix + "/stdio.log") else {
            throw TestSupportError("cannot open \(prefix)/stdio.log")
        }
        defer { try? output.close() }
        // -e: errors found before the config is read also go to our log, not /var/log/nginx.
        return try SpawnedProcess(
            nginx, ["-p", prefix, "-c", prefix + "/nginx.conf", "-e", prefix + "/error.log"], environment: nil,
            currentDirectory: nil, output: output.fileDescriptor, error: output.fileDescriptor)
    }

    // nginx writes its pid file only after it has bound the listening socket, so a pid file naming
    // our child means the port is ours (a connect alone might reach another test's server).
    private static func waitUntilServing(_ process: SpawnedProcess, prefix: String, port: Int) throws -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            guard process.isRunning else {
                process.waitUntilExit()
                return false
            }
            let pidText = try? String(contentsOfFile: prefix + "/nginx.pid", encoding: .utf8)
            if pidText?.trimmingCharacters(in: .whitespacesAndNewlines) == String(process.pid),
                canConnect(port: port)
            {
                return true
            }
            usleep(5_000)
        }
        kill(process.pid, SIGKILL)
        process.waitUntilExit()
        throw TestSupportError("nginx in \(prefix) did not come up within 10 s")
    }

    private static func parseLogLine(_ line: Substring) -> AccessLogEntry? {
        let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(unescape)
        guard fields.count >= 10, let status = Int(fields[3]), let body = Int(fields[4]), let total = Int(fields[5])
        else {
            return nil
        }
        func header(_ value: String) -> String? { value == "-" ? nil : value }
        return AccessLogEntry(
            method: fields[0], uri: fields[1], requestURI: fields[2], status: status, bodyBytesSent: body,
            bytesSent: total, range: header(fields[6]), ifRange: header(fields[7]), ifNoneMatch: header(fields[8]),
            ifModifiedSince: header(fields[9]), serverProtocol: fields.count > 10 ? header(fields[10]) : nil,
            connection: fields.count > 11 ? Int(fields[11]) : nil)
    }

    /// Undoes nginx's default log escaping: `"`, `\\` and bytes outside printable ASCII are written
    /// as `\xHH` (an ETag's quotes among them).
    private static func unescape(_ field: Substring) -> String {
        var bytes = [UInt8]()
        var rest = Array(field.utf8)[...]
        while let byte = rest.popFirst() {
            if byte == UInt8(ascii: "\\"), rest.first == UInt8(ascii: "x"), rest.count >= 3,
                let value = UInt8(String(decoding: rest.dropFirst().prefix(2), as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                rest = rest.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: - Sockets and processes

    /// Whether nothing listens on (or lingers in TIME_WAIT at) 127.0.0.1:`port` right now.
    public static func portLooksFree(_ port: Int) -> Bool {
        withLoopbackSocket(port: port) { bind($0, $1, $2) == 0 }
    }

    private static func canConnect(port: Int) -> Bool {
        withLoopbackSocket(port: port) { connect($0, $1, $2) == 0 }
    }

    /// Runs `body` with a fresh TCP socket and the address 127.0.0.1:`port`, closing the socket after.
    private static func withLoopbackSocket(
        port: Int, _ body: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Bool
    ) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }
}

/// A `sockaddr_in` for 127.0.0.1:`port`.
func loopback(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
    return address
}

/// The pids whose parent is `parent`, read from `/proc/*/stat`.
public func childProcesses(of parent: pid_t) -> [pid_t] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { name -> pid_t? in
        guard let pid = pid_t(name), let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the parenthesised command name: state, ppid, ...
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 1 && pid_t(fields[1]) == parent ? pid : nil
    }
}

/// Whether a process with this pid exists (a zombie counts as gone).
public func processIsAlive(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return false }
    return stat[stat.index(after: close)...].split(separator: " ").first != "Z"
}
