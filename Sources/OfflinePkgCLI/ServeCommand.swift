import Dispatch
import FoundationEssentials
import Synchronization
import OfflinePkg
import OfflinePkgServer
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

enum ServeCommand {
    static let spec = CommandSpec(
        name: "serve", arguments: [],
        options: [
            .root,
            .init(name: "host", value: "ADDR", help: "loopback address to listen on: 127.0.0.0/8 or ::1 (default 127.0.0.1)"),
            .init(name: "port", value: "N", help: "port to listen on; 0 picks a free one (default 0)"),
            .init(name: "tls", help: "answer https with the root's loopback certificate (made in <root>/tls/ on first use)"),
            .init(
                name: "origin", value: "URL",
                help: "answer a request whose Host is the server's own address as if made to this origin (https://m.example.com)"),
            .init(name: "header-timeout", value: "S", help: "seconds a connection has to send a request's headers (default 10)"),
            .init(name: "idle-timeout", value: "S", help: "seconds an idle keep-alive connection is kept (default 60)"),
            .init(
                name: "max-connections", value: "N",
                help: "connections held at once (default 32768, capped by the open-file limit)"),
            .init(
                name: "max-header-size", value: "BYTES",
                help: "bytes of request line and headers a request may carry; larger ones get 431 (default 8192)"),
            .init(
                name: "offline", value: nil,
                help: "never touch the network for runtime-cache URLs: stored answers, else 504 (also OFFLINEPKG_OFFLINE=1)"),
            .init(
                name: "resolve", value: "HOST:PORT:ADDR", repeatable: true,
                help: "reach an upstream HOST:PORT at ADDR, as curl's --resolve (repeatable)"),
            .init(
                name: "cacert", value: "FILE",
                help: "trust these certificate authorities (PEM) for runtime-cache upstreams instead of the system's, as curl's --cacert"),
            .init(
                name: "allow-private-upstream", value: nil,
                help: "let runtime-cache upstreams resolve to loopback, link-local or private addresses (else 502)"),
            .init(
                name: "max-upstream-transfers", value: "N",
                help: "runtime-cache transfers running at once; more wait their turn or get 503 (default 16)"),
            .init(
                name: "allow-user", value: "USER", repeatable: true,
                help: "also answer connections of this user (name or uid); serve's own user and root always are (repeatable)"),
        ],
        summary: "serve the active set over HTTP on loopback for the shell; prints the URL, runs until SIGINT/SIGTERM",
        run: run)

    static func run(_ arguments: ParsedArguments, _ context: CLIContext) async throws -> Int32 {
        let port = try arguments.integer("port", in: 0...65535) ?? 0
        let host = arguments.value("host") ?? "127.0.0.1"
        // A closed client socket must end one response, not the server (MHD writes to sockets itself).
        signal(SIGPIPE, SIG_IGN)
        var limits = LoopbackServer.Limits()
        if let seconds = try arguments.integer("header-timeout", in: 1...3600) { limits.headerTimeout = TimeInterval(seconds) }
        if let seconds = try arguments.integer("idle-timeout", in: 1...86_400) { limits.idleTimeout = TimeInterval(seconds) }
        if let count = try arguments.integer("max-connections", in: 1...1_000_000) { limits.connectionLimit = count }
        if let bytes = try arguments.integer("max-header-size", in: LoopbackServer.Limits.requestHeaderRange) {
            limits.requestHeaderBytes = bytes
        }
        var origin: URL?
        if let text = arguments.value("origin") {
            guard let url = URL(string: text) else {
                throw UsageError("--origin takes a URL such as https://m.example.com, got \"\(text)\"")
            }
            origin = url
        }
        // Every held connection is a descriptor: the soft limit (often 1,024) would cap the server far
        // below the 10,000 connections of docs/protocol.md#the-loopback-server, so serve raises it to the hard limit.
        raiseOpenFileLimit()
        let store = try PackageStore(root: URL(fileURLWithPath: context.existingRoot(arguments)))
        let runtimeOptions = try runtimeOptions(arguments, context)
        // A root this user may read but not write still serves its packages, without a runtime cache.
        var runtime: RuntimeCache?
        do {
            runtime = try RuntimeCache(layout: store.layout, options: runtimeOptions, world: context.world)
        } catch {
            context.output.error("warning: no runtime cache (URLs outside packages answer 404): \(error)")
        }
        let server: LoopbackServer
        do {
            server = try LoopbackServer(
                store: store, host: host, port: UInt16(port), threadModel: threadModel(context), limits: limits,
                tls: arguments.flag("tls"), origin: origin, runtime: runtime, admission: try admission(arguments, context))
        } catch OfflinePkgError.invalidArgument(let reason) {
            throw UsageError(reason)
        }
        // The signals are taken before the first answer: a supervisor or a benchmark may send SIGTERM
        // as soon as serve answers.
        let termination = try TerminationSignals()
        try server.start()
        context.output.print(server.url.absoluteString)
        await termination.wait()
        server.stop()
        runtime?.flushStatistics()
        return OfflinePkgCommand.ExitStatus.success
    }

    /// `--allow-user` (names or uids) and one line on stderr the first time each other user is refused,
    /// so a shell that runs as another user than serve is told why it gets no answer.
    private static func admission(_ arguments: ParsedArguments, _ context: CLIContext) throws -> LoopbackServer.Admission {
        var users = Set<uid_t>()
        for name in arguments.all("allow-user") {
            if let entry = getpwnam(name) {
                users.insert(entry.pointee.pw_uid)
            } else if let uid = uid_t(name) {
                users.insert(uid)
            } else {
                throw UsageError("--allow-user takes a user name or uid of this system, got \"\(name)\"")
            }
        }
        let told = Mutex<Set<uid_t?>>([])
        let output = context.output
        let own = geteuid()
        return LoopbackServer.Admission(users: users) { uid in
            guard told.withLock({ $0.insert(uid).inserted }) else { return }
            let who = uid.map { uid in "uid \(uid)" + (getpwuid(uid).map { " (\(String(cString: $0.pointee.pw_name)))" } ?? "") }
            output.error(
                "offlinepkg serve: closed a connection from \(who ?? "a socket no process holds"): serve answers its own user (uid \(own)) and root; --allow-user admits another"
            )
        }
    }

    private static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// `--offline` / `OFFLINEPKG_OFFLINE=1` and `--resolve HOST:PORT:ADDRESS` pins (docs/protocol.md#the-runtime-cache),
    /// and where and how much the upstreams may be reached (docs/protocol.md#neighbours-on-the-device).
    private static func runtimeOptions(_ arguments: ParsedArguments, _ context: CLIContext) throws -> RuntimeCache.Options {
        let pins = arguments.all("resolve")
        for pin in pins {
            let parts = pin.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, !parts[0].isEmpty, UInt16(parts[1]) != nil, !parts[2].isEmpty else {
                throw UsageError("--resolve takes HOST:PORT:ADDRESS (as curl's), got \"\(pin)\"")
            }
        }
        let offline = arguments.flag("offline") || context.environment["OFFLINEPKG_OFFLINE"] == "1"
        var options = RuntimeCache.Options(offline: offline, resolve: pins, caBundle: try SyncCommand.certificateAuthorities(arguments))
        options.allowPrivateUpstream = arguments.flag("allow-private-upstream")
        if let transfers = try arguments.integer("max-upstream-transfers", in: 1...1024) { options.upstreamTransfers = transfers }
        return options
    }

    /// `OFFLINEPKG_SERVE_THREADS`: a pool size, or `per-connection`; to compare thread models
    /// (docs/performance.md, "Profiling").
    private static func threadModel(_ context: CLIContext) throws -> LoopbackServer.ThreadModel {
        guard let value = context.environment["OFFLINEPKG_SERVE_THREADS"], !value.isEmpty else { return .standard }
        if value == "per-connection" { return .threadPerConnection }
        guard let threads = Int(value), (1...256).contains(threads) else {
            throw UsageError(
                "OFFLINEPKG_SERVE_THREADS takes a thread count from 1 to 256 or \"per-connection\", got \"\(value)\"")
        }
        return .pool(threads: threads)
    }
}

/// SIGINT and SIGTERM, taken from the moment this is made: a handler writes each to a pipe
/// (`TerminationSignalPipe`), which a dispatch source reads, so no handler code runs in signal context
/// and none that arrives before `wait()` or `onSignal`, or before the source is armed, is lost. What
/// `serve`, `reports serve` (which wait for one) and `sync` (which is cancelled by one) take them with.
final class TerminationSignals: @unchecked Sendable {
    private struct State {
        var received: Int32?
        var continuation: CheckedContinuation<Void, Never>?
        var action: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())
    private let source: any DispatchSourceRead

    init() throws {
        let pipe = try TerminationSignalPipe()
        source = DispatchSource.makeReadSource(fileDescriptor: pipe.readEnd, queue: .global())
        source.setEventHandler { [weak self] in
            var bytes = [UInt8](repeating: 0, count: 16)
            var first: UInt8?
            while case let count = read(pipe.readEnd, &bytes, bytes.count), count > 0 { first = first ?? bytes[0] }
            if let first { self?.fire(Int32(first)) }
        }
        // The source's handlers hold the pipe: it is closed only once dispatch is done with its descriptor.
        source.setCancelHandler { withExtendedLifetime(pipe) {} }
        source.resume()
    }

    deinit { source.cancel() }

    /// The first signal that came, if one did.
    var received: Int32? { state.withLock { $0.received } }

    /// Whether a signal came (for tests; `wait` is what a command uses).
    var hasFired: Bool { received != nil }

    /// Runs `action` once, at the first signal, or now if one came already.
    func onSignal(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.received != nil { return true }
            state.action = action
            return false
        }
        if now { action() }
    }

    /// Returns at the first SIGINT or SIGTERM since `init`.
    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.received != nil { return true }
                state.continuation = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    private func fire(_ number: Int32) {
        let (pending, action) = state.withLock { state -> (CheckedContinuation<Void, Never>?, (@Sendable () -> Void)?) in
            guard state.received == nil else { return (nil, nil) }
            state.received = number
            defer { (state.continuation, state.action) = (nil, nil) }
            return (state.continuation, state.action)
        }
        pending?.resume()
        action?()
    }
}
