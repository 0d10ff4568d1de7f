internal import CMicroHTTPD
import Dispatch
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The loopback HTTP server for a host shell (docs/protocol.md#the-loopback-server): answers `GET`/`HEAD` for any URL the
/// active set covers, from the `Host` header and path or an absolute-form target, with `ETag`, `304`,
/// `206` and `404`. It reads the store's current snapshot per request, so a set activated by another
/// process is served within the store's watch interval, without a restart.
///
/// Built on libmicrohttpd: small files go out from `ResponseCache`, larger ones from a memory map
/// (`MappedFileBody`); keep-alive and request parsing are MHD's.
public final class LoopbackServer: Sendable {
    /// Connections and cached open files, within the open-file limit at `init`.
    let budget: DescriptorBudget
    public let store: PackageStore
    public let host: String
    public let threadModel: ThreadModel
    public let limits: Limits
    /// Whether the server answers https (`serve --tls`), with the root's loopback certificate.
    public let usesTLS: Bool
    private let requestedPort: UInt16
    private let address: SocketAddress
    /// One per lane (each pool thread's daemon; one for a thread per connection): each lane's thread
    /// answers from its own response caches (the copied ones drawing on one `SharedBytes`, an atomic
    /// count), so no lock or MHD response is shared between threads on
    /// the hot path (a thread preempted while holding a shared cache's lock would stall the others).
    private let handlers: [RequestHandler]
    /// The memory cache capacity the handlers' copied caches share.
    private let memory: SharedBytes
    private let runtime: RuntimeCacheResponder?
    private let deadlines: ConnectionDeadlines
    private let admission: Admission
    private let state = Mutex<State>(State())

    private struct State: ~Copyable {
        var acceptor: ConnectionAcceptor?
        var peers: PeerAdmission?
        var daemons: [Daemon] = []
        /// Daemons of a certificate a re-issue replaced, still holding connections; stopped when they
        /// hold none, or by `stop()`.
        var retired: [Daemon] = []
        var port: UInt16 = 0
        var certificate: LoopbackCertificate?
        var watcher: Task<Void, Never>?
    }

    /// Prepares a server on `host` (an IPv4 or IPv6 loopback literal, or `localhost`) and `port`
    /// (0: a free port, see `port` after `start()`). Throws for an address that is not loopback: the
    /// server is for the shell on the same device and offers nothing to a network.
    ///
    /// `tls`: answer https with the root's loopback certificate (made on first use, re-issued when a
    /// switch brings new hosts). `origin`: a request whose `Host` is the server's own address is
    /// answered as if made to this origin (`https://m.example.com`), for a web view that cannot map
    /// names to loopback. With `runtime`, a request no package answers goes to the runtime cache when a
    /// rule covers its URL. `admission`: whose connections are served besides this process's user and
    /// root (docs/protocol.md#neighbours-on-the-device); every other is closed unanswered.
    public init(
        store: PackageStore, host: String = "127.0.0.1", port: UInt16 = 0, threadModel: ThreadModel = .standard,
        limits: Limits = .init(), tls: Bool = false, origin: URL? = nil, runtime: RuntimeCache? = nil,
        admission: Admission = .init()
    ) throws {
        guard let address = SocketAddress(host: host, port: port) else {
            throw OfflinePkgError.invalidArgument("serve host \(host) is not an IPv4 or IPv6 address")
        }
        guard address.isLoopback else {
            throw OfflinePkgError.invalidArgument(
                "serve host \(host) is not a loopback address (127.0.0.0/8 or ::1): the server is for the shell on the same device"
            )
        }
        switch threadModel {
        case .pool(let threads) where threads < 1:
            throw OfflinePkgError.invalidArgument("a thread pool needs at least one thread, got \(threads)")
        case .elastic(let threads, let busyThreads, let spreadPast) where threads < 1 || busyThreads < threads || spreadPast < 1:
            throw OfflinePkgError.invalidArgument(
                "an elastic pool needs at least one thread, as many or more when busy, and at least one connection per lane before it spreads; got \(threads), \(busyThreads), \(spreadPast)"
            )
        default: break
        }
        guard limits.headerTimeout > 0, limits.idleTimeout >= 1, limits.connectionLimit >= 1 else {
            throw OfflinePkgError.invalidArgument(
                "serve limits need a header timeout above 0 s, an idle timeout of at least 1 s and at least one connection")
        }
        guard Limits.requestHeaderRange.contains(limits.requestHeaderBytes) else {
            throw OfflinePkgError.invalidArgument(
                "serve takes request headers of \(Limits.requestHeaderRange.lowerBound) to \(Limits.requestHeaderRange.upperBound) bytes, got \(limits.requestHeaderBytes)"
            )
        }
        self.store = store
        self.host = host
        self.requestedPort = port
        self.threadModel = threadModel
        self.limits = limits
        self.usesTLS = tls
        self.address = address
        let runtime = runtime.map { RuntimeCacheResponder(cache: $0, canSuspend: threadModel != .threadPerConnection) }
        let origin = try origin.map(OriginRewrite.init)
        let lanes = threadModel.lanes.all
        let budget = DescriptorBudget(asked: limits.connectionLimit, lanes: lanes, tls: tls)
        self.budget = budget
        self.runtime = runtime
        let memory = SharedBytes(capacity: store.options.memoryCacheCapacity)
        self.memory = memory
        self.handlers = (0..<lanes).map { _ in
            RequestHandler(
                store: store, origin: origin, ownHost: host, tls: tls, runtime: runtime, memory: memory,
                cachedFiles: budget.cachedFilesPerLane)
        }
        self.deadlines = ConnectionDeadlines(headerTimeout: limits.headerTimeout, idleTimeout: limits.idleTimeout)
        // Refusals count where `status` reports the runtime cache, when there is one.
        var admission = admission
        let told = admission.refused
        admission.refused = { [weak runtime] uid in
            runtime?.cache.countRefusedConnection()
            told?(uid)
        }
        self.admission = admission
    }

    deinit { stop() }

    /// Binds and starts serving on MHD's threads; returns at once.
    public func start() throws {
        try state.withLock { state in
            guard state.acceptor == nil else { return }
            var certificate: LoopbackCertificate?
            if usesTLS {
                certificate = try LoopbackCertificate.prepare(layout: store.layout, for: store.activeSet, alsoNaming: runtimePrefixes)
            }
            let peers = try PeerAdmission(admission)
            let acceptor: ConnectionAcceptor
            do throws(Errno) {
                let lanes = threadModel.lanes
                acceptor = try ConnectionAcceptor(
                    address: address, backlog: 4096, connectionLimit: budget.connections,
                    spreading: .init(quietLanes: lanes.quiet, past: lanes.spreadPast), deadlines: deadlines, admission: peers)
            } catch {
                throw OfflinePkgError.io(path: "\(host):\(requestedPort)", operation: usesTLS ? "listen (tls)" : "listen", error)
            }
            let daemons: [Daemon]
            do { daemons = try startDaemons(certificate: certificate) } catch {
                acceptor.stop()
                throw error
            }
            state.port = acceptor.port
            for handler in handlers { handler.ownPort.store(state.port, ordering: .releasing) }
            deadlines.start()
            acceptor.serve(daemons)
            acceptor.start()
            state.acceptor = acceptor
            state.peers = peers
            state.daemons = daemons
            state.certificate = certificate
            if usesTLS { state.watcher = watchForNewHosts() }
        }
    }

    /// Closes the listening socket and every connection, and waits for MHD's threads to finish.
    public func stop() {
        let (acceptor, daemons, watcher) = state.withLock { state -> (ConnectionAcceptor?, [Daemon], Task<Void, Never>?) in
            defer {
                state.acceptor = nil
                state.daemons = []
                state.retired = []
                state.watcher = nil
            }
            return (state.acceptor, state.daemons + state.retired, state.watcher)
        }
        watcher?.cancel()
        acceptor?.stop()
        // MHD may not stop with a connection suspended: those waiting on the network are answered 503.
        runtime?.abandonWaiting()
        for daemon in daemons { daemon.stop() }
        if acceptor != nil { deadlines.stop() }
        // No connection is left to send them: the large files' responses close their files now, not
        // when the server object goes.
        for handler in handlers { handler.largeResponses.keepOnly(trees: []) }
    }

    /// The certificate `serve --tls` presents now (nil for plain HTTP).
    package var certificate: LoopbackCertificate? { state.withLock { $0.certificate } }

    /// Connections of another user closed unanswered (docs/protocol.md#neighbours-on-the-device; tests, diagnostics).
    package var connectionsRefused: Int { state.withLock { $0.peers?.refusedCount.load(ordering: .relaxed) ?? 0 } }

    /// Connections closed for missing the header or keep-alive deadline (tests, diagnostics).
    package var connectionsClosedByDeadline: Int { deadlines.closedCount }

    /// Idle keep-alive connections closed to make room at the connection limit (tests, diagnostics).
    package var idleConnectionsClosedForRoom: Int { deadlines.closedForRoomCount }

    /// Connections shut down because the file they were being sent from changed size (tests, diagnostics).
    package var connectionsClosedForChangedFile: Int { deadlines.closedForChangedFileCount }

    /// Daemons of a replaced certificate not stopped yet: they still hold connections (tests, diagnostics).
    package var retiredDaemons: Int { state.withLock { $0.retired.count } }

    /// Connections each of the current lanes (a pool's threads) holds (tests, diagnostics).
    package var connectionsPerLane: [Int] { state.withLock { $0.acceptor?.connectionsPerLane ?? [] } }

    /// The pool's threads as one daemon each (`ConnectionAcceptor` hands them connections), or one
    /// daemon with a thread per connection.
    private func startDaemons(certificate: LoopbackCertificate?) throws -> [Daemon] {
        var daemons = [Daemon]()
        do {
            for (lane, handler) in handlers.enumerated() {
                daemons.append(try startDaemon(certificate: certificate, handler: handler, busyOnly: lane >= threadModel.lanes.quiet))
            }
        } catch {
            for daemon in daemons { daemon.stop() }
            throw error
        }
        return daemons
    }

    /// `busyOnly`: a lane that takes connections only under load (`ThreadModel.elastic`); when its last
    /// one closes, it gives its cached responses' bytes back for the quiet lanes.
    private func startDaemon(certificate: LoopbackCertificate?, handler: RequestHandler, busyOnly: Bool) throws -> Daemon {
        // No listening socket of its own: connections come from `ConnectionAcceptor` through
        // `MHD_add_connection`, which needs the inter-thread channel to wake the daemon's thread.
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_NO_LISTEN_SOCKET.rawValue | MHD_USE_ITC.rawValue
        switch threadModel {
        case .pool, .elastic:
            // poll, not epoll: libmicrohttpd 0.9.75's epoll loop takes 128 events per `epoll_wait` and
            // calls it again, with the same timeout, whenever it got exactly 128, so a thread with 256
            // requests in at once (512 connections on two) sleeps on them until its next event or
            // connection timeout. TURBO: skips the locking
            // and shutdown() a thread of its own does not need.
            flags |= MHD_USE_POLL_INTERNAL_THREAD.rawValue | MHD_USE_TURBO.rawValue
        case .threadPerConnection:
            flags |= MHD_USE_THREAD_PER_CONNECTION.rawValue | MHD_USE_POLL.rawValue
        }
        // The runtime cache suspends a connection while it waits on the network.
        if runtime != nil, threadModel != .threadPerConnection { flags |= MHD_ALLOW_SUSPEND_RESUME.rawValue }
        let responses = handler.responses
        let emptied: (@Sendable () -> Void)? = busyOnly ? { @Sendable in responses.removeAll() } : nil
        let daemon = Daemon(certificate: certificate, deadlines: deadlines, whenEmptied: emptied)
        var config = cmicrohttpd_config()
        config.flags = flags
        // MHD's own inactivity timeout: for a client that stops reading a response. The header and
        // keep-alive deadlines are `ConnectionDeadlines`'.
        config.idle_timeout = UInt32(limits.idleTimeout.rounded(.up))
        config.connection_memory = Self.connectionMemory(headerBytes: limits.requestHeaderBytes)
        // The total is `ConnectionAcceptor`'s to keep; any one daemon may hold all of it.
        config.connection_limit = UInt32(budget.connections)
        // A thread per connection: thousands of held connections are thousands of stacks.
        config.thread_stack_size = threadModel == .threadPerConnection ? 512 * 1024 : 0
        config.tls_key = daemon.key.map { UnsafePointer($0) }
        config.tls_certificate = daemon.certificatePEM.map { UnsafePointer($0) }
        config.handler = handleRequest
        config.handler_context = Unmanaged.passUnretained(handler).toOpaque()
        config.notify_connection = notifyConnection
        config.notify_completed = notifyCompleted
        config.request_began = requestBegan
        config.notify_context = Unmanaged.passUnretained(daemon).toOpaque()
        guard let pointer = cmicrohttpd_start(&config) else {
            throw OfflinePkgError.io(
                path: "\(host):\(requestedPort)", operation: usesTLS ? "start server (tls)" : "start server",
                Errno(errno == 0 ? ENOMEM : errno))
        }
        daemon.pointer = pointer
        return daemon
    }

    /// Re-issues the certificate when a switch brings a host it does not name, and moves the listening
    /// socket to a daemon presenting the new one: no restart, no refused connection (the kernel queues
    /// connections during the hand-over). The old daemon finishes the requests it has, then stops.
    ///
    /// The runtime rules' hosts are served too (docs/protocol.md#the-runtime-cache), and a manifest may change them without a
    /// switch (a republish with new `--runtime` rules): while the server has a runtime cache, they are
    /// looked at once a second, and a change presents a certificate for them the same way.
    private func watchForNewHosts() -> Task<Void, Never> {
        let activations = store.activations
        return Task.detached { [weak self] in
            await withTaskGroup(of: Void.self) { group in
                group.addTask { [weak self] in
                    for await set in activations {
                        guard let self else { return }
                        // On failure the old certificate keeps being served; the next switch tries again.
                        try? self.present(for: set)
                    }
                }
                guard let runtime = self?.runtime else { return }
                group.addTask { [weak self] in
                    var seen = runtime.cache.configuration?.rules.map(\.prefix) ?? []
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(1))
                        let prefixes = runtime.cache.configuration?.rules.map(\.prefix) ?? []
                        guard prefixes != seen, let self else { continue }
                        seen = prefixes
                        try? self.present(for: self.store.activeSet)
                    }
                }
            }
        }
    }

    /// The runtime rules' prefixes, whose hosts the certificate names beside the routes'.
    private var runtimePrefixes: [String] { runtime?.cache.configuration?.rules.map(\.prefix) ?? [] }

    private func present(for set: ActiveSet) throws {
        let retired = try state.withLock { state -> [Daemon] in
            guard let acceptor = state.acceptor, let certificate = state.certificate else { return [] }
            let next = try LoopbackCertificate.prepare(layout: store.layout, for: set, alsoNaming: runtimePrefixes)
            guard next.certificatePEM != certificate.certificatePEM else { return [] }
            let daemons = try startDaemons(certificate: next)
            acceptor.serve(daemons)
            defer {
                state.retired += state.daemons
                state.daemons = daemons
                state.certificate = next
            }
            return state.daemons
        }
        guard !retired.isEmpty else { return }
        stopRetiredDaemonsWhenEmpty()
    }

    /// Requests in flight on the old daemons' connections finish first, and their keep-alive
    /// connections close (at the latest by the idle deadline), clients reconnecting to the new ones. A
    /// daemon is stopped only once it holds no connection: MHD may not stop one with a connection
    /// suspended (a runtime-cache request waiting on the network), and a request on it must never
    /// outlive its handler. `stop()` stops whatever is left, after abandoning the waits.
    private func stopRetiredDaemonsWhenEmpty() {
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) { [weak self] in
            guard let self else { return }
            // One look at each count: a daemon that emptied between two looks would leave the list
            // unstopped, and be stopped by its deinit under this lock.
            let (empty, more) = state.withLock { state -> ([Daemon], Bool) in
                let looked = state.retired.map { ($0, $0.connections.load(ordering: .acquiring) == 0) }
                state.retired = looked.filter { !$0.1 }.map(\.0)
                return (looked.filter(\.1).map(\.0), !state.retired.isEmpty)
            }
            for daemon in empty { daemon.stop() }
            if more { stopRetiredDaemonsWhenEmpty() }
        }
    }

    /// The port listened on: the one asked for, or the one the kernel picked for port 0.
    public var port: UInt16 { state.withLock { $0.acceptor == nil ? requestedPort : $0.port } }

    /// Bytes and entries of the small-file response cache (tests, diagnostics).
    package var cachedResponses: (bytes: Int, entries: Int) {
        cachedResponsesPerLane.reduce((0, 0)) { ($0.bytes + $1.bytes, $0.entries + $1.entries) }
    }

    /// Bytes the lanes' copied caches have taken of the shared capacity: their bytes together, when
    /// every take and give is paired (tests, diagnostics).
    package var cachedBytesTaken: Int { memory.used }

    /// The same for each lane's cache (together within the capacity: `SharedBytes`).
    package var cachedResponsesPerLane: [(bytes: Int, entries: Int)] { handlers.map(\.responses.usage) }

    /// Large files' cached responses, all lanes (tests): behind plain HTTP each holds the file open.
    package var cachedLargeResponses: (bytes: Int, entries: Int) {
        handlers.map(\.largeResponses.usage).reduce((0, 0)) { ($0.bytes + $1.bytes, $0.entries + $1.entries) }
    }

    /// `http://host:port/` (`https://` with TLS), IPv6 hosts in brackets.
    public var url: URL {
        let hostPart = address.isIPv6 ? "[\(host)]" : (host == "localhost" ? "127.0.0.1" : host)
        return URL(string: "\(usesTLS ? "https" : "http")://\(hostPart):\(port)/")!
    }
}
