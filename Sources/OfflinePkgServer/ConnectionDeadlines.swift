internal import CMicroHTTPD
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The two deadlines of docs/protocol.md#the-loopback-server, which MHD's own connection timeout cannot give: that timeout restarts at
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
///
/// The sweeper also watches the file each connection is being sent from the open descriptor
/// (`sendfile`): one truncated behind the index while it is sent (something other than offlinepkg
/// writing into a read-only tree) makes `sendfile` return 0, which MHD 0.9.75 counts as activity and
/// retries, spinning its lane for as long as the server runs. A file no longer of its installed size
/// gets its connection shut down at the next sweep.
final class ConnectionDeadlines: Sendable {
    /// One accepted connection: its socket and the monotonic time (ns) by which its headers are due,
    /// `UInt64.max` while a request is being answered.
    final class Entry: Sendable {
        let socket: Int32
        let deadline: Atomic<UInt64>
        /// Between a response and the next request's first header (keep-alive): a connection that
        /// may be closed to make room at the connection limit.
        let idle = Atomic<Bool>(false)
        /// Shut down for room, MHD's close not seen yet: it still counts against the limit, and the
        /// acceptor must not close another one for the same waiting client meanwhile.
        let closingForRoom = Atomic<Bool>(false)
        /// The installed file the response in progress is sent from with `sendfile`, and its size.
        let sending = Mutex<(path: String, size: Int64)?>(nil)
        /// The current request's target as sent, query included.
        let target = RecordedTarget()

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
    private let closedForChangedFile = Atomic<Int>(0)
    /// Connections shut down for room whose close MHD has not reported yet.
    private let pendingForRoom = Atomic<Int>(0)

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

    /// Connections shut down because the file they were sent from changed size (tests, diagnostics).
    var closedForChangedFileCount: Int { closedForChangedFile.load(ordering: .relaxed) }

    /// Idle keep-alive connections closed to make room for new ones at the limit (tests, diagnostics).
    var closedForRoomCount: Int { closedForRoom.load(ordering: .relaxed) }

    func opened(socket: Int32) -> Entry {
        let entry = Entry(socket: socket, deadline: Self.now() + headerTimeout)
        entries.withLock { $0[ObjectIdentifier(entry)] = entry }
        return entry
    }

    /// MHD calls this before it closes the socket, so the sweeper never shuts down a reused number.
    func closed(_ entry: Entry) {
        _ = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(entry)) }
        if entry.closingForRoom.exchange(false, ordering: .acquiringAndReleasing) { pendingForRoom.subtract(1, ordering: .relaxed) }
    }

    /// At the connection limit with `waiting` clients in the listen queue: closes idle keep-alive
    /// connections, those idle longest first, as nginx reuses its keep-alive connections when it runs
    /// out — one for each waiting client that no earlier close, still being finished by MHD, makes room
    /// for, and at most `limit`. A client that keeps a connection open between requests must never keep
    /// a new client out for the whole idle timeout. A connection whose client has sent a byte of its
    /// next request is not idle any more (`requestBegan`, or bytes not read yet). Returns how many it
    /// closed.
    @discardableResult
    func closeIdle(waiting: Int, limit: Int) -> Int {
        let wanted = min(limit, waiting - pendingForRoom.load(ordering: .relaxed))
        guard wanted > 0 else { return 0 }
        let closed = entries.withLock { entries -> Int in
            // The idle ones in order of their deadline, found in one pass keeping at most `wanted`
            // (≤ 32): no sort of every held connection (tens of thousands) under the lock MHD's close
            // notifications wait on, every 10 ms while clients wait.
            var oldest = [(deadline: UInt64, entry: Entry)]()
            for entry in entries.values where entry.idle.load(ordering: .relaxed) {
                let deadline = entry.deadline.load(ordering: .relaxed)
                guard oldest.count < wanted || deadline < oldest[oldest.count - 1].deadline else { continue }
                let at = oldest.firstIndex { $0.deadline > deadline } ?? oldest.count
                oldest.insert((deadline, entry), at: at)
                if oldest.count > wanted { oldest.removeLast() }
            }
            var closed = 0
            // Under the lock of `closed(_:)`: every entry here is still held, its number not reused.
            for (_, entry) in oldest where closed < wanted && !Self.hasBytesWaiting(entry.socket) {
                // A request whose headers arrived meanwhile keeps its connection.
                guard entry.idle.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
                else { continue }
                entry.deadline.store(.max, ordering: .relaxed)
                entry.closingForRoom.store(true, ordering: .releasing)
                pendingForRoom.add(1, ordering: .relaxed)
                // Counted before the shutdown, as the sweeper counts its closes.
                closedForRoom.add(1, ordering: .relaxed)
                shutdown(entry.socket, Int32(SHUT_RDWR))
                closed += 1
            }
            return closed
        }
        return closed
    }

    /// Whether the client has sent bytes not read yet (the start of its next request).
    private static func hasBytesWaiting(_ socket: Int32) -> Bool {
        var byte: UInt8 = 0
        return recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
    }

    func start() {
        let mine = generation.add(1, ordering: .acquiringAndReleasing).newValue
        OSThread.start(name: "offlinepkg.deadlines") { [self] in
            while generation.load(ordering: .acquiring) == mine {
                OSThread.sleep(seconds: 0.5)
                if generation.load(ordering: .acquiring) == mine { sweep() }
            }
        }
    }

    func stop() { generation.add(1, ordering: .acquiringAndReleasing) }

    private func sweep() {
        let now = Self.now()
        entries.withLock { entries in
            for entry in entries.values {
                // Counted before the shutdown: a client that sees its connection end finds it counted.
                if entry.deadline.load(ordering: .relaxed) < now {
                    entry.idle.store(false, ordering: .relaxed)
                    entry.deadline.store(.max, ordering: .relaxed)
                    closedByDeadline.add(1, ordering: .relaxed)
                    shutdown(entry.socket, Int32(SHUT_RDWR))
                } else if entry.sending.withLock({ Self.takeIfChanged(&$0) }) {
                    closedForChangedFile.add(1, ordering: .relaxed)
                    shutdown(entry.socket, Int32(SHUT_RDWR))
                }
            }
        }
    }

    /// Whether the file being sent no longer has its installed size; if so it is no longer watched.
    /// Checked and cleared under one lock, so a response that follows on the connection keeps its
    /// own. By path, not by the response's descriptor, whose number may be closed and reused
    /// meanwhile; a file removed from its path (a tree collected while sent) is intact.
    private static func takeIfChanged(_ sending: inout (path: String, size: Int64)?) -> Bool {
        guard let file = sending else { return false }
        var status = stat()
        guard stat(file.path, &status) == 0, Int64(status.st_size) != file.size else { return false }
        sending = nil
        return true
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
        if daemon.connections.subtract(1, ordering: .relaxed).newValue == 0 { daemon.whenEmptied?() }
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
    entry.sending.withLock { $0 = nil }
    entry.deadline.store(ConnectionDeadlines.now() + deadlines.idleTimeout, ordering: .relaxed)
    // Only a request answered whole leaves a connection to keep alive; one that failed closes anyway.
    if code == .REQUEST_TERMINATED_COMPLETED_OK { entry.idle.store(true, ordering: .releasing) }
}

/// MHD's URI log callback: a request's first line is in, its headers maybe not yet. The connection is
/// not idle from here on (it must not be closed for room), though its header deadline still runs. The
/// target is kept whole before MHD cuts its query off (`RecordedTarget`). Returns the request's first
/// context: none.
func requestBegan(
    context: UnsafeMutableRawPointer?, uri: UnsafePointer<CChar>?, connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let connection, let stored = cmicrohttpd_socket_context(connection) else { return nil }
    let entry = Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored).takeUnretainedValue()
    entry.idle.store(false, ordering: .releasing)
    if let uri { entry.target.record(uri) }
    return nil
}

/// The connection's current request target as sent (`requestBegan`), or nil outside a request.
func recordedTarget(_ connection: OpaquePointer) -> RecordedTarget? {
    guard let stored = cmicrohttpd_socket_context(connection) else { return nil }
    return Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored).takeUnretainedValue().target
}

/// Called by the access handler when a request's headers are in: no deadline while it is answered.
func headersArrived(_ connection: OpaquePointer) {
    guard let stored = cmicrohttpd_socket_context(connection) else { return }
    let entry = Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored).takeUnretainedValue()
    entry.idle.store(false, ordering: .releasing)
    entry.deadline.store(.max, ordering: .relaxed)
}

/// Called by the access handler when it queues a response sent from the open file `path` of `size`
/// bytes (`sendfile`): the sweeper shuts the connection down if the file changes size meanwhile.
func sendingFile(_ connection: OpaquePointer, path: String, size: Int64) {
    guard let stored = cmicrohttpd_socket_context(connection) else { return }
    Unmanaged<ConnectionDeadlines.Entry>.fromOpaque(stored).takeUnretainedValue().sending.withLock { $0 = (path, size) }
}
