internal import CMicroHTTPD
import Foundation
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The loopback HTTP server for a host shell (SPEC §8 `serve`): answers `GET`/`HEAD` for any URL the
/// active set covers, from the `Host` header and path or an absolute-form target, with `ETag`, `304`,
/// `206` and `404`. It reads the store's current snapshot per request, so a set activated by another
/// process is served within the store's watch interval, without a restart.
///
/// Built on libmicrohttpd: small files go out from `ResponseCache`, larger ones from a memory map
/// (`MappedFileBody`); keep-alive and request parsing are MHD's.
public final class LoopbackServer: Sendable {
    /// How MHD runs connections.
    public enum ThreadModel: Sendable, Equatable {
        /// epoll with a pool of this many threads, each serving many connections.
        case pool(threads: Int)
        /// One thread per connection (poll).
        case threadPerConnection

        /// A pool with one thread per core: measured fastest (docs/benchmarks.md).
        public static var standard: ThreadModel { .pool(threads: max(1, ProcessInfo.processInfo.activeProcessorCount)) }
    }

    /// SPEC §10's limits: how many connections are held, and how long a connection may take.
    public struct Limits: Sendable, Equatable {
        /// Seconds a new connection has to deliver a request's headers (TLS handshake included).
        public var headerTimeout: TimeInterval
        /// Seconds a keep-alive connection may wait for its next request, idle or trickling.
        public var idleTimeout: TimeInterval
        /// Connections held at once; capped by the process's open-file limit (`RLIMIT_NOFILE`).
        public var connectionLimit: Int

        public init(headerTimeout: TimeInterval = 10, idleTimeout: TimeInterval = 60, connectionLimit: Int = 32_768) {
            self.headerTimeout = headerTimeout
            self.idleTimeout = idleTimeout
            self.connectionLimit = connectionLimit
        }
    }

    /// Each connection's memory pool (MHD's default).
    static let connectionMemory = 32 * 1024
    /// File descriptors kept free for the server's own files (mapped bodies, the store's reads).
    static let reservedDescriptors = 64

    public let store: PackageStore
    public let host: String
    public let threadModel: ThreadModel
    public let limits: Limits
    /// Whether the server answers https (`serve --tls`), with the root's loopback certificate.
    public let usesTLS: Bool
    private let requestedPort: UInt16
    private let address: SocketAddress
    private let handler: RequestHandler
    private let deadlines: ConnectionDeadlines
    private let state = Mutex<State>(State())

    private struct State: ~Copyable {
        var daemon: Daemon?
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
    /// rule covers its URL.
    public init(
        store: PackageStore, host: String = "127.0.0.1", port: UInt16 = 0, threadModel: ThreadModel = .standard,
        limits: Limits = .init(), tls: Bool = false, origin: URL? = nil, runtime: RuntimeCache? = nil
    ) throws {
        guard let address = SocketAddress(host: host, port: port) else {
            throw OfflinePkgError.invalidArgument("serve host \(host) is not an IPv4 or IPv6 address")
        }
        guard address.isLoopback else {
            throw OfflinePkgError.invalidArgument(
                "serve host \(host) is not a loopback address (127.0.0.0/8 or ::1): the server is for the shell on the same device"
            )
        }
        if case .pool(let threads) = threadModel, threads < 1 {
            throw OfflinePkgError.invalidArgument("a thread pool needs at least one thread, got \(threads)")
        }
        guard limits.headerTimeout > 0, limits.idleTimeout >= 1, limits.connectionLimit >= 1 else {
            throw OfflinePkgError.invalidArgument(
                "serve limits need a header timeout above 0 s, an idle timeout of at least 1 s and at least one connection")
        }
        self.store = store
        self.host = host
        self.requestedPort = port
        self.threadModel = threadModel
        self.limits = limits
        self.usesTLS = tls
        self.address = address
        self.handler = RequestHandler(store: store, origin: try origin.map(OriginRewrite.init), ownHost: host, tls: tls,
            runtime: runtime.map { RuntimeCacheResponder(cache: $0, canSuspend: threadModel != .threadPerConnection) })
        self.deadlines = ConnectionDeadlines(headerTimeout: limits.headerTimeout, idleTimeout: limits.idleTimeout)
    }

    deinit { stop() }

    /// Binds and starts serving on MHD's threads; returns at once.
    public func start() throws {
        try state.withLock { state in
            guard state.daemon == nil else { return }
            var certificate: LoopbackCertificate?
            if usesTLS { certificate = try LoopbackCertificate.prepare(layout: store.layout, for: store.activeSet) }
            let daemon = try startDaemon(listeningOn: nil, certificate: certificate)
            state.daemon = daemon
            state.certificate = certificate
            state.port = cmicrohttpd_bound_port(daemon.pointer)
            handler.ownPort.store(state.port, ordering: .releasing)
            deadlines.start()
            if usesTLS { state.watcher = watchForNewHosts() }
        }
    }

    /// Closes the listening socket and every connection, and waits for MHD's threads to finish.
    public func stop() {
        let (daemon, watcher) = state.withLock { state -> (Daemon?, Task<Void, Never>?) in
            defer {
                state.daemon = nil
                state.watcher = nil
            }
            return (state.daemon, state.watcher)
        }
        watcher?.cancel()
        // MHD may not stop with a connection suspended: those waiting on the network are answered 503.
        handler.runtime?.abandonWaiting()
        daemon?.stop()
        if daemon != nil { deadlines.stop() }
    }

    /// The certificate `serve --tls` presents now (nil for plain HTTP).
    package var certificate: LoopbackCertificate? { state.withLock { $0.certificate } }

    /// Connections closed for missing the header or keep-alive deadline (tests, diagnostics).
    package var connectionsClosedByDeadline: Int { deadlines.closedCount }

    private func startDaemon(listeningOn socket: Int32?, certificate: LoopbackCertificate?) throws -> Daemon {
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue
        var poolSize: UInt32 = 0
        switch threadModel {
        case .pool(let threads):
            // TURBO: skips the listen-socket locking and shutdown() a pool does not need.
            flags |= MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_USE_TURBO.rawValue
            poolSize = UInt32(threads)
        case .threadPerConnection:
            flags |= MHD_USE_THREAD_PER_CONNECTION.rawValue | MHD_USE_POLL.rawValue
        }
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        // A re-issued certificate needs a new daemon on the same socket: MHD_quiesce_daemon hands the
        // socket over, and needs the inter-thread channel to tell its threads.
        if certificate != nil { flags |= MHD_USE_ITC.rawValue }
        // The runtime cache suspends a connection while it waits on the network.
        if handler.runtime != nil, threadModel != .threadPerConnection { flags |= MHD_ALLOW_SUSPEND_RESUME.rawValue }
        let daemon = Daemon(certificate: certificate)
        let pointer = address.withSockaddr { sockaddr -> OpaquePointer? in
            var config = cmicrohttpd_config()
            config.flags = flags
            config.address = sockaddr
            config.listen_fd = socket ?? -1
            config.pool_size = poolSize
            // MHD's own inactivity timeout: for a client that stops reading a response. The header and
            // keep-alive deadlines are `ConnectionDeadlines`'.
            config.idle_timeout = UInt32(limits.idleTimeout.rounded(.up))
            config.connection_memory = Self.connectionMemory
            config.connection_limit = UInt32(Self.connectionLimit(limits.connectionLimit))
            config.listen_backlog = 4096
            // A thread per connection: thousands of held connections are thousands of stacks.
            config.thread_stack_size = threadModel == .threadPerConnection ? 512 * 1024 : 0
            config.tls_key = daemon.key.map { UnsafePointer($0) }
            config.tls_certificate = daemon.certificatePEM.map { UnsafePointer($0) }
            config.handler = handleRequest
            config.handler_context = Unmanaged.passUnretained(handler).toOpaque()
            config.notify_connection = notifyConnection
            config.notify_completed = notifyCompleted
            config.notify_context = Unmanaged.passUnretained(deadlines).toOpaque()
            return cmicrohttpd_start(&config)
        }
        guard let pointer else {
            let code = errno == 0 ? EADDRINUSE : errno
            throw OfflinePkgError.io(
                path: "\(host):\(requestedPort)", operation: usesTLS ? "listen (tls)" : "listen", Errno(code))
        }
        daemon.pointer = pointer
        return daemon
    }

    /// The connection limit MHD gets: as asked, but never more than the open-file limit leaves after
    /// the server's own files (MHD refuses connections past its limit; past the file limit accept fails).
    static func connectionLimit(_ asked: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return asked }
        return max(1, min(asked, Int(limit.rlim_cur) - reservedDescriptors))
    }

    /// Re-issues the certificate when a switch brings a host it does not name, and moves the listening
    /// socket to a daemon presenting the new one: no restart, no refused connection (the kernel queues
    /// connections during the hand-over). The old daemon finishes the requests it has, then stops.
    private func watchForNewHosts() -> Task<Void, Never> {
        let activations = store.activations
        return Task.detached { [weak self] in
            for await set in activations {
                guard let self else { return }
                do { try self.present(for: set) } catch {
                    // The old certificate keeps being served; the next switch tries again.
                    continue
                }
            }
        }
    }

    private func present(for set: ActiveSet) throws {
        let retired = try state.withLock { state -> Daemon? in
            guard let current = state.daemon, let certificate = state.certificate else { return nil }
            let next = try LoopbackCertificate.prepare(layout: store.layout, for: set)
            guard next.certificatePEM != certificate.certificatePEM else { return nil }
            let socket = MHD_quiesce_daemon(current.pointer)
            guard socket >= 0 else { return nil }
            state.daemon = try startDaemon(listeningOn: socket, certificate: next)
            state.certificate = next
            return current
        }
        guard let retired else { return }
        // Requests in flight on the old daemon's connections finish first; its keep-alive connections
        // then close, and clients reconnect to the new one.
        DispatchQueue.global().asyncAfter(deadline: .now() + 5) { retired.stop() }
    }

    /// The port listened on: the one asked for, or the one the kernel picked for port 0.
    public var port: UInt16 { state.withLock { $0.daemon == nil ? requestedPort : $0.port } }

    /// Bytes and entries of the small-file response cache (tests, diagnostics).
    package var cachedResponses: (bytes: Int, entries: Int) { handler.responses.usage }

    /// `http://host:port/` (`https://` with TLS), IPv6 hosts in brackets.
    public var url: URL {
        let hostPart = address.isIPv6 ? "[\(host)]" : (host == "localhost" ? "127.0.0.1" : host)
        return URL(string: "\(usesTLS ? "https" : "http")://\(hostPart):\(port)/")!
    }
}

/// One MHD daemon and the PEM text it was started with (MHD reads it at start; kept until stop so no
/// pointer it holds can dangle).
private final class Daemon: @unchecked Sendable {
    // @unchecked: `pointer` is set once right after start, before the daemon is shared; `stop` runs once.
    var pointer: OpaquePointer!
    let key: UnsafeMutablePointer<CChar>?
    let certificatePEM: UnsafeMutablePointer<CChar>?
    private let stopped = Atomic<Bool>(false)

    init(certificate: LoopbackCertificate?) {
        key = certificate.map { strdup($0.keyPEM) }
        certificatePEM = certificate.map { strdup($0.certificatePEM) }
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing), let pointer else { return }
        MHD_stop_daemon(pointer)
    }

    deinit {
        stop()
        free(key)
        free(certificatePEM)
    }
}
