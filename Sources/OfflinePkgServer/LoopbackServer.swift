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

    /// Each connection's memory pool (MHD's default).
    static let connectionMemory = 32 * 1024

    public let store: PackageStore
    public let host: String
    public let threadModel: ThreadModel
    private let requestedPort: UInt16
    private let address: SocketAddress
    private let handler: RequestHandler
    private let state = Mutex<State>(State())

    private struct State: ~Copyable {
        var daemon: OpaquePointer?
        var port: UInt16 = 0
    }

    /// Prepares a server on `host` (an IPv4 or IPv6 loopback literal, or `localhost`) and `port`
    /// (0: a free port, see `port` after `start()`). Throws for an address that is not loopback: the
    /// server is for the shell on the same device and offers nothing to a network.
    /// With `runtime`, a request no package answers goes to the runtime cache when a rule covers its URL.
    public init(
        store: PackageStore, host: String = "127.0.0.1", port: UInt16 = 0, threadModel: ThreadModel = .standard,
        runtime: RuntimeCache? = nil
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
        self.store = store
        self.host = host
        self.requestedPort = port
        self.threadModel = threadModel
        self.address = address
        self.handler = RequestHandler(
            store: store,
            runtime: runtime.map { RuntimeCacheResponder(cache: $0, canSuspend: threadModel != .threadPerConnection) })
    }

    deinit { stop() }

    /// Binds and starts serving on MHD's threads; returns at once.
    public func start() throws {
        try state.withLock { state in
            guard state.daemon == nil else { return }
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
            if handler.runtime != nil, threadModel != .threadPerConnection { flags |= MHD_ALLOW_SUSPEND_RESUME.rawValue }
            let context = Unmanaged.passUnretained(handler).toOpaque()
            // Idle keep-alive connections close after 60 s, so a per-connection thread cannot linger.
            let daemon = address.withSockaddr { sockaddr in
                cmicrohttpd_start_daemon(flags, sockaddr, poolSize, 60, Self.connectionMemory, handleRequest, context)
            }
            guard let daemon else {
                throw OfflinePkgError.io(
                    path: "\(host):\(requestedPort)", operation: "listen", Errno(errno == 0 ? EADDRINUSE : errno))
            }
            state.daemon = daemon
            state.port = cmicrohttpd_bound_port(daemon)
        }
    }

    /// Closes the listening socket and every connection, and waits for MHD's threads to finish.
    public func stop() {
        let daemon = state.withLock { state -> OpaquePointer? in
            defer { state.daemon = nil }
            return state.daemon
        }
        // MHD may not stop with a connection suspended: those waiting on the network are answered 503.
        handler.runtime?.abandonWaiting()
        if let daemon { MHD_stop_daemon(daemon) }
    }

    /// The port listened on: the one asked for, or the one the kernel picked for port 0.
    public var port: UInt16 { state.withLock { $0.daemon == nil ? requestedPort : $0.port } }

    /// Bytes and entries of the small-file response cache (tests, diagnostics).
    package var cachedResponses: (bytes: Int, entries: Int) { handler.responses.usage }

    /// `http://host:port/`, IPv6 hosts in brackets.
    public var url: URL {
        let hostPart = address.isIPv6 ? "[\(host)]" : (host == "localhost" ? "127.0.0.1" : host)
        return URL(string: "http://\(hostPart):\(port)/")!
    }
}
