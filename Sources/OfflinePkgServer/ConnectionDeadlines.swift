internal import CMicroHTTPD
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// SPEC §10's two deadlines, which MHD's own connection timeout cannot give: that timeout restarts at
/// every byte received, so a client sending a header byte every few seconds would hold its
/// connection (and, thousands of them, the server) forever.
///
/// - a new connection must deliver a request's headers within `headerTimeout` of being accepted (a
///   TLS handshake counts against it);
/// - a keep-alive connection must deliver the next request's headers within `idleTimeout` of the
///   last response: idle or trickling, it is closed then.
///
/// While a request is being answered no deadline runs (a slow reader of a large file is MHD's
/// inactivity timeout's business). One sweeper thread checks every connection twice a second and
/// shuts down the socket of each one past its deadline; MHD then sees the close and cleans up.
final class ConnectionDeadlines: Sendable {
    /// One accepted connection: its socket and the monotonic time (ns) by which its headers are due,
    /// `UInt64.max` while a request is being answered.
    final class Entry: Sendable {
        let socket: Int32
        let deadline: Atomic<UInt64>
        /// Between a response and the next request's first header (keep-alive): a connection that
        /// may be closed to make room at the connection limit.
        let idle = Atomic<Bool>(false)

        init(socket: Int32, deadline: UInt64) {
            self.socket = socket
            self.deadline = Atomic(deadline)
        }
    }

    let headerTimeout: UInt64
    let idleTimeout: UInt64
    private let entries = Mutex<[ObjectIdentifier: Entry]>([:])
    /// Each `start()` and `stop()` moves it on; a sweeper runs while it is the one its start set, so a
    /// server stopped and started again gets a sweeper again (and an old one still asleep just ends).
    private let generation = Atomic<Int>(0)
    private let closedByDeadline = Atomic<Int>(0)
    private let closedForRoom = Atomic<Int>(0)

    init(headerTimeout: TimeInterval, idleTimeout: TimeInterval) {
        self.headerTimeout = UInt64(headerTimeout * 1e9)
        self.idleTimeout = UInt64(idleTimeout * 1e9)
    }

    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Connections closed for missing a deadline (tests, diagnostics).
    var closedCount: Int { closedByDeadline.load(ordering: .relaxed) }

    /// Idle keep-alive connections closed to make room for new ones at the limit (tests, diagnostics).
    var closedForRoomCount: Int { closedForRoom.load(ordering: .relaxed) }

    func opened(socket: Int32) -> Entry {
        let entry = Entry(socket: socket, deadline: Self.now() + headerTimeout)
        entries.withLock { $0[ObjectIdentifier(entry)] = entry }
        return entry
    }

    /// MHD calls this before it closes the socket, so the sweeper never shuts down a reused number.
    func closed(_ entry: Entry) { _ = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(entry)) } }

    /// At the connection limit with clients waiting: closes up to `count` idle keep-alive connections,
    /// those idle longest first, as nginx reuses its keep-alive connections when it runs out. A client
    /// that keeps a connection open between requests must never keep a new client out for the whole
    /// idle timeout. Returns how many it closed (none when every held connection is busy or new).
    @discardableResult
    func closeIdle(upTo count: Int) -> Int {
        let oldest = entries.withLock { entries in
            entries.values.filter { $0.idle.load(ordering: .relaxed) }
                .sorted { $0.deadline.load(ordering: .relaxed) < $1.deadline.load(ordering: .relaxed) }
                .prefix(count)
        }
        var closed = 0
        for entry in oldest {
            // A request that began meanwhile keeps its connection.
            guard entry.idle.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
            else { continue }
            entries.withLock { entries in
                // Still held (not closed by MHD meanwhile, its number not reused): shut it down.
                guard entries[ObjectIdentifier(entry)] != nil else { return }
                entry.deadline.store(.max, ordering: .relaxed)
                shutdown(entry.socket, Int32(SHUT_RDWR))
                closed += 1
            }
        }
        closedForRoom.add(closed, ordering: .relaxed)
        return closed
    }

    func start() {
        let mine = generation.add(1, ordering: .acquiringAndReleasing).newValue
        let thread = Thread { [self] in
            while generation.load(ordering: .acquiring) == mine {
                Thread.sleep(forTimeInterval: 0.5)
                if generation.load(ordering: .acquiring) == mine { sweep() }
            }
        }
        thread.name = "offlinepkg.serve-deadlines"
        thread.start()
    }

    func stop() { generation.add(1, ordering: .acquiringAndReleasing) }

    private func sweep() {
        let now = Self.now()
        entries.withLock { entries in
            for entry in entries.values where entry.deadline.load(ordering: .relaxed) < now {
                entry.idle.store(false, ordering: .relaxed)
                entry.deadline.store(.max, ordering: .relaxed)
                shutdown(entry.socket, Int32(SHUT_RDWR))
                closedByDeadline.add(1, ordering: .relaxed)
            }
        }
    }
}

/// MHD's connection notifier (accepted / closed), with the `Daemon` as context. A plain function: MHD
/// calls it on its own threads.
func notifyConnection(
    context: UnsafeMutableRawPointer?, connection: OpaquePointer?, socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    code: MHD_ConnectionNotificationCode
) {
    guard let context, let connection, let socketContext else { return }
    let daemon = Unmanaged<Daemon>.fromOpaque(context).takeUnretainedValue()
    let deadlines = daemon.deadlines
    switch code {
    case .CONNECTION_NOTIFY_STARTED:
        let entry = deadlines.opened(socket: cmicrohttpd_connection_fd(connection))
        socketContext.pointee = Unmanaged.passRetained(entry).toOpaque()
    case .CONNECTION_NOTIFY_CLOSED:
        guard let stored = socketContext.pointee else { return }
        let entry = Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored)
        deadlines.closed(entry.takeUnretainedValue())
        entry.release()
        socketContext.pointee = nil
        daemon.connections.subtract(1, ordering: .relaxed)
    default:
        break
    }
}

/// MHD's request-completed notifier: the keep-alive wait for the next request's headers starts.
func notifyCompleted(
    context: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    code: MHD_RequestTerminationCode
) {
    guard let context, let connection, let stored = cmicrohttpd_socket_context(connection) else { return }
    let deadlines = Unmanaged<Daemon>.fromOpaque(context).takeUnretainedValue().deadlines
    let entry = Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored).takeUnretainedValue()
    entry.deadline.store(ConnectionDeadlines.now() + deadlines.idleTimeout, ordering: .relaxed)
    entry.idle.store(true, ordering: .releasing)
}

/// Called by the access handler when a request's headers are in: no deadline while it is answered.
func headersArrived(_ connection: OpaquePointer) {
    guard let stored = cmicrohttpd_socket_context(connection) else { return }
    let entry = Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored).takeUnretainedValue()
    entry.idle.store(false, ordering: .releasing)
    entry.deadline.store(.max, ordering: .relaxed)
}
