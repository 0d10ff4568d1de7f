internal import CSystemShims

#if canImport(Glibc)
import Glibc
#endif

/// SIGINT and SIGTERM as bytes on a pipe: a handler, installed by `init` before it returns, writes each
/// signal's number to the pipe, and whoever reads `readEnd` (a dispatch read source, a thread) learns of
/// it whenever it looks. A signal that arrives before anyone listens waits in the pipe; with the signals
/// ignored and taken by dispatch signal sources instead, one that arrived before the sources were armed
/// (which happens later, on dispatch's own thread) was lost. The handler writes to the last one made.
package final class TerminationSignalPipe: Sendable {
    /// The end to read the signals' numbers from, one byte each.
    package let readEnd: Int32
    private let writeEnd: Int32

    package init() throws(OfflinePkgError) {
        var (read, write): (Int32, Int32) = (-1, -1)
        guard csystemshims_termination_signal_pipe(&read, &write) == 0 else {
            throw .io(path: "SIGINT and SIGTERM", operation: "pipe2 and sigaction", Errno.current)
        }
        (readEnd, writeEnd) = (read, write)
    }

    /// The default actions back (unless a later pipe took the signals), then the pipe closed. Whoever
    /// reads `readEnd` through a dispatch source keeps this alive until the source's cancel handler.
    deinit {
        csystemshims_restore_termination_signals(writeEnd)
        close(writeEnd)
        close(readEnd)
    }
}
