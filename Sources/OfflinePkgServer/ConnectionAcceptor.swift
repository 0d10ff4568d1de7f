internal import CMicroHTTPD
import Dispatch
import FoundationEssentials
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The server's listening socket and the one thread that accepts from it, handing each connection to
/// the lane (an MHD daemon with one thread, or a thread per connection) that holds the fewest: of the
/// quiet lanes while they hold few, of all lanes past that (`Spreading`).
///
/// MHD's own thread pool lets every thread accept from the shared socket, up to 10 at a time: a burst
/// of new connections lands mostly on whichever thread wakes first, and that thread's connections then
/// wait behind each other while the other thread idles. Its `MHD_add_connection` spreads by socket
/// number, which the process's other files decide. So the server accepts itself and balances by count.
final class ConnectionAcceptor: Sendable {
    let listener: Int32
    /// Connections held at once, over all lanes (a replaced certificate's daemons too); at it, the
    /// idle keep-alive connections longest idle are closed for clients waiting, and if every held one
    /// is busy, new ones wait in the kernel's queue until one closes.
    let connectionLimit: Int
    /// The address the listener is bound to, its port the kernel's pick for port 0: every connection's
    /// own end, since the listener is bound to one address.
    let localAddress: sockaddr_storage
    /// A pipe whose write end wakes the accepting thread to stop.
    private let wake: (read: Int32, write: Int32)
    private let held: Mutex<Held>
    private let deadlines: ConnectionDeadlines
    private let spreading: Spreading
    /// Whose connections are served (docs/protocol.md#neighbours-on-the-device); checked once per connection, here, before a lane.
    private let admission: PeerAdmission?

    /// Which lanes take new connections: the first `quietLanes` while they hold fewer than `past` each
    /// on average (the fewest-first hand-over keeps them even), every lane from then on
    /// (`LoopbackServer.ThreadModel.elastic`). A connection stays on its lane until it closes.
    struct Spreading {
        let quietLanes: Int
        let past: Int

        init(quietLanes: Int, past: Int) {
            precondition(quietLanes >= 1 && past >= 1, "spreading needs a quiet lane and a connection per lane")
            self.quietLanes = quietLanes
            self.past = past
        }

        /// Every lane, always.
        static let everyLane = Spreading(quietLanes: .max, past: .max)

        /// How many of the lanes, from the first, may take a connection when they hold `counts`.
        func open(_ counts: [Int]) -> Int {
            let quiet = min(quietLanes, counts.count)
            guard quiet < counts.count else { return counts.count }
            return counts.prefix(quiet).reduce(0, +) / quiet < past ? quiet : counts.count
        }
    }

    private struct Held {
        /// Where new connections go.
        var lanes: [Daemon] = []
        /// Lanes replaced by `serve(_:)`, until `isAtLimit` finds them empty: they count against the limit.
        var retired: [Daemon] = []
    }
    private let next = Atomic<UInt>(0)
    private let finished = DispatchSemaphore(value: 0)
    private let running = Atomic<Bool>(false)

    /// Binds and listens on `address` (the kernel queues up to `backlog` connections not yet accepted).
    init(
        address: SocketAddress, backlog: Int32, connectionLimit: Int, spreading: Spreading = .everyLane,
        deadlines: ConnectionDeadlines, admission: PeerAdmission? = nil
    ) throws(Errno) {
        let listener = socket(address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard listener >= 0 else { throw Errno(errno) }
        var one: Int32 = 1
        // As MHD does: a restarted server binds its port while old connections sit in TIME_WAIT.
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if address.isIPv6 { setsockopt(listener, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        Self.avoidPacing(listener)
        let bound = address.withSockaddr { bind(listener, $0, address.length) }
        guard bound == 0, Glibc.listen(listener, backlog) == 0, let local = Self.boundAddress(listener) else {
            let code = errno
            close(listener)
            throw Errno(code)
        }
        var pipeEnds: [Int32] = [-1, -1]
        guard pipe(&pipeEnds) == 0 else {
            let code = errno
            close(listener)
            throw Errno(code)
        }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        self.listener = listener
        localAddress = local
        wake = (pipeEnds[0], pipeEnds[1])
        self.connectionLimit = connectionLimit
        self.spreading = spreading
        self.deadlines = deadlines
        self.admission = admission
        held = Mutex(Held())
    }

    deinit { closeSockets() }

    /// The address `listener` is bound to, or nil (errno set).
    private static func boundAddress(_ listener: Int32) -> sockaddr_storage? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        return named == 0 ? storage : nil
    }

    /// Congestion controls for loopback connections, the first the kernel takes: neither paces.
    private static let loopbackCongestionControls = ["cubic", "reno"]

    /// Gives the listener, and so every connection it accepts, a congestion control that does not pace.
    /// A loopback connection has no path to probe or to pace for, but BBR (the default on many hosts)
    /// paces every flow, and without the `fq` queueing discipline TCP paces with a high-resolution timer
    /// armed per burst: serving large files to many connections, a lane can spend its whole core in
    /// that send path, where cubic or reno send at once. When the kernel takes neither, the host's
    /// default stays.
    private static func avoidPacing(_ listener: Int32) {
        for name in loopbackCongestionControls where Socket.setCongestionControl(listener, name) { return }
    }

    private let closed = Atomic<Bool>(false)

    private func closeSockets() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        close(listener)
        close(wake.read)
        close(wake.write)
    }

    /// The bound port (the kernel's pick for port 0).
    var port: UInt16 {
        // `sin_port` and `sin6_port` lie at the same place.
        withUnsafeBytes(of: localAddress) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) }
    }

    /// Where new connections go from now on (a re-issued certificate's daemons); connections already
    /// handed out stay where they are.
    func serve(_ daemons: [Daemon]) {
        // Every old lane, empty or not: a connection being handed to one right now is counted a moment
        // later. `isAtLimit`, on the accepting thread after each hand-over, drops the empty ones.
        held.withLock { held in
            held.retired += held.lanes
            held.lanes = daemons
        }
    }

    /// Connections each lane holds now (tests, diagnostics).
    var connectionsPerLane: [Int] { held.withLock { $0.lanes.map { $0.connections.load(ordering: .relaxed) } } }

    func start() {
        running.store(true, ordering: .releasing)
        let started = OSThread.start(name: "offlinepkg.accept") { [self] in
            acceptUntilWoken()
            finished.signal()
        }
        // No thread to be had: nothing accepts, and `stop` must not wait for a thread that never ran.
        if !started { finished.signal() }
    }

    /// Stops accepting, waits for the thread and closes the listener (connections still queued are
    /// refused).
    func stop() {
        if running.exchange(false, ordering: .acquiringAndReleasing) {
            var one: UInt64 = 1
            _ = write(wake.write, &one, 1)
            finished.wait()
        }
        closeSockets()
    }

    private func acceptUntilWoken() {
        var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        var timeout: Int32 = -1
        while true {
            fds[0].revents = 0
            fds[1].revents = 0
            let ready = poll(&fds, 2, timeout)
            if fds[1].revents != 0 { return }
            timeout = -1
            fds[0].events = Int16(POLLIN)
            guard ready > 0 || isAtLimit else { continue }
            // Every connection queued, each to its lane, before polling again.
            while true {
                if isAtLimit {
                    // Room for the clients waiting, from connections idle between requests; the
                    // closes land within the 10 ms before the next look (the listener left out of
                    // the poll meanwhile).
                    let waiting = clientsWaiting
                    if waiting > 0 { deadlines.closeIdle(waiting: waiting, limit: Self.idleClosedAtOnce) }
                    fds[0].events = 0
                    timeout = 10
                    break
                }
                var storage = sockaddr_storage()
                var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
                let client = withUnsafeMutablePointer(to: &storage) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        // Close-on-exec from the start: not inherited by a process the host starts.
                        Socket.acceptClosingOnExec(listener, $0, &length)
                    }
                }
                if client < 0 {
                    // Out of descriptors or memory: the connection waits in the queue. The listener
                    // stays readable, so it is left out of the poll for 10 ms; polling it again at once
                    // would spin a core until a descriptor is free.
                    if [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(errno) {
                        fds[0].events = 0
                        timeout = 10
                    }
                    break
                }
                // (MHD makes it non-blocking.)
                hand(client, peer: storage, length: length)
            }
        }
    }

    /// Idle connections closed per look at the limit (nginx frees up to 32 at a time).
    static let idleClosedAtOnce = 32

    private var isAtLimit: Bool {
        held.withLock { held in
            if !held.retired.isEmpty { held.retired.removeAll { $0.connections.load(ordering: .relaxed) == 0 } }
            let count = { (lanes: [Daemon]) in lanes.reduce(0) { $0 + $1.connections.load(ordering: .relaxed) } }
            return count(held.lanes) + count(held.retired)
        } >= connectionLimit
    }

    /// Connections waiting in the listener's queue: for a listening socket, Linux reports the queue's
    /// length as `TCP_INFO`'s `tcpi_unacked` (what `ss -l` shows as Recv-Q).
    private var clientsWaiting: Int {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(listener, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else {
            var listening = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            return poll(&listening, 1, 0) > 0 && listening.revents & Int16(POLLIN) != 0 ? 1 : 0
        }
        return Int(info.tcpi_unacked)
    }

    /// To the open lane (`Spreading`) with the fewest connections, ties taken in turn (a burst is
    /// accepted faster than the lanes' threads register it).
    private func hand(_ client: Int32, peer: sockaddr_storage, length: socklen_t) {
        if let admission, !admission.admit(client, peer: peer, local: localAddress) { return }
        let lanes = held.withLock { $0.lanes }
        guard !lanes.isEmpty else {
            close(client)
            return
        }
        let counts = lanes.map { $0.connections.load(ordering: .relaxed) }
        let open = spreading.open(counts)
        let start = Int(next.wrappingAdd(1, ordering: .relaxed).oldValue % UInt(open))
        var chosen = start
        for step in 1..<max(1, open) {
            let index = (start + step) % open
            if counts[index] < counts[chosen] { chosen = index }
        }
        let lane = lanes[chosen]
        lane.connections.add(1, ordering: .relaxed)
        // MHD closes the socket when it cannot take it.
        var peer = peer
        let added = withUnsafePointer(to: &peer) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { MHD_add_connection(lane.pointer, client, $0, length) }
        }
        if added != .YES {
            lane.connections.subtract(1, ordering: .relaxed)
        }
    }
}
