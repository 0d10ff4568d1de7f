internal import CMicroHTTPD
import OfflinePkg
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One MHD daemon (one thread of the pool, or the thread-per-connection daemon), the PEM text it was
/// started with (MHD reads it at start; kept until stop so no pointer it holds can dangle), and the
/// connections it holds (`ConnectionAcceptor` adds, MHD's close notification takes away). The context
/// of its connection notifications.
final class Daemon: @unchecked Sendable {
    // @unchecked: `pointer` is set once right after start, before the daemon is shared; `stop` runs once.
    var pointer: OpaquePointer!
    let key: UnsafeMutablePointer<CChar>?
    let certificatePEM: UnsafeMutablePointer<CChar>?
    let deadlines: ConnectionDeadlines
    let connections = Atomic<Int>(0)
    /// Run on the daemon's thread when its last connection closes.
    let whenEmptied: (@Sendable () -> Void)?
    private let stopped = Atomic<Bool>(false)

    init(certificate: LoopbackCertificate?, deadlines: ConnectionDeadlines, whenEmptied: (@Sendable () -> Void)? = nil) {
        key = certificate.map { strdup($0.keyPEM) }
        certificatePEM = certificate.map { strdup($0.certificatePEM) }
        self.deadlines = deadlines
        self.whenEmptied = whenEmptied
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
