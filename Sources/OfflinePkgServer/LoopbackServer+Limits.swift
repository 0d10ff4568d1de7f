import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// What a server may hold: the limits of docs/protocol.md#the-loopback-server, each connection's memory, and the open-file budget.
extension LoopbackServer {
    /// The limits of docs/protocol.md#the-loopback-server: how many connections are held, and how long a connection may take.
    public struct Limits: Sendable, Equatable {
        /// Seconds a new connection has to deliver a request's headers (TLS handshake included).
        public var headerTimeout: TimeInterval
        /// Seconds a keep-alive connection may wait for its next request, idle or trickling.
        public var idleTimeout: TimeInterval
        /// Connections held at once; capped by the process's open-file limit (`RLIMIT_NOFILE`).
        public var connectionLimit: Int
        /// Bytes of request line and header fields every request may carry; one more than 4 KiB
        /// larger is answered 431 (or its connection closed, when it is still sending). MHD's list of
        /// the fields shares the room: a request of more than about 60 fields gets less (a browser
        /// sends 15–25). The default takes nginx's default header line (8 KiB) with a browser's
        /// other headers beside it. Each connection holds twice this and 4 KiB
        /// (`connectionMemory(headerBytes:)`), zeroed by MHD after every request.
        public var requestHeaderBytes: Int

        public init(
            headerTimeout: TimeInterval = 10, idleTimeout: TimeInterval = 60, connectionLimit: Int = 32_768,
            requestHeaderBytes: Int = 8 * 1024
        ) {
            self.headerTimeout = headerTimeout
            self.idleTimeout = idleTimeout
            self.connectionLimit = connectionLimit
            self.requestHeaderBytes = requestHeaderBytes
        }

        /// The range `requestHeaderBytes` takes: up to 64 KiB, twice nginx's default total (32 KiB).
        /// Past that the pool costs more than it serves: every held connection keeps twice the
        /// limit, and MHD zeroes the whole pool after every request.
        public static let requestHeaderRange = 1024...(64 * 1024)
    }

    /// Each connection's MHD memory pool for requests of up to `headerBytes` of headers. MHD reads a
    /// request into half of the pool and keeps the rest for its header list and the answer's header,
    /// so a pool of twice the headers and 4 KiB takes them (`ServeHardeningTests`). MHD zeroes the
    /// whole pool after every request, so a pool larger than the headers need costs every request
    /// time (its default 32 KiB was a noticeable share of a busy lane's).
    static func connectionMemory(headerBytes: Int) -> Int { 2 * headerBytes + 4 * 1024 }

    /// How the open-file limit (`RLIMIT_NOFILE`, which `serve` raises to the hard limit first) is
    /// shared: the server's own files, the large-file caches' open files, and connections. Behind
    /// plain HTTP a connection may hold two descriptors, its socket and the file its response is sent
    /// from (a range or a file past the caches, opened for it, or an entry the cache evicted, which
    /// stays open until its last connection is done), so it counts
    /// twice: past the limit a client waits in the kernel's queue, rather than a request finding no
    /// descriptor for its file.
    package struct DescriptorBudget: Equatable {
        /// For the server's own files: the store's reads, a request's file while it is opened (and,
        /// behind TLS, mapped).
        package static let reserved = 64
        /// Files each lane's large-file cache keeps open (`ResponseCache.Body.file`; none behind TLS).
        package let cachedFilesPerLane: Int
        /// Connections held at once: as asked, within what the limit leaves.
        package let connections: Int

        /// `openFiles`: the process's open-file limit; nil when it has none.
        package init(openFiles: Int?, asked: Int, lanes: Int, tls: Bool) {
            // At most 16 a lane, and all lanes' together at most a quarter of the limit.
            cachedFilesPerLane = tls ? 0 : max(1, min(ResponseCache.openFileLimit, (openFiles ?? .max) / 4 / max(1, lanes)))
            guard let openFiles else {
                connections = asked
                return
            }
            let left = openFiles - Self.reserved - cachedFilesPerLane * lanes
            connections = max(1, min(asked, left / (tls ? 1 : 2)))
        }

        /// With the process's current open-file limit.
        init(asked: Int, lanes: Int, tls: Bool) {
            var limit = rlimit()
            let known = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur != rlim_t.max
            self.init(openFiles: known ? Int(clamping: limit.rlim_cur) : nil, asked: asked, lanes: lanes, tls: tls)
        }
    }
}
