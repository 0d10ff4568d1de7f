import FoundationEssentials
import OfflinePkg
import Synchronization

/// Turns sync events into progress on stderr: a redrawn bar on a terminal, plain lines otherwise
/// (cron mail, journald), nothing with `--quiet`.
final class ProgressReporter: Sendable {
    enum Style { case bars, lines, none }

    private let style: Style
    private let output: Output
    private let clock: WallClock
    private let state = Mutex<State>(State())

    private struct State {
        var totals: [String: Int64] = [:]
        var received: [String: Int64] = [:]
        var lastDraw = Date.distantPast
        var lastLineMarks: [String: Int] = [:]
    }

    init(style: Style, output: Output, clock: WallClock) {
        self.style = style
        self.output = output
        self.clock = clock
    }

    func handle(_ event: SyncEvent) {
        guard style != .none else { return }
        switch event {
        case .failed: finish()  // the command prints the error itself, once, as it exits
        case .waitingForLock(let root): line(RootWait.message(root))
        case .checking(let url): line("checking \(url)")
        case .manifestUnchanged: line("manifest not modified")
        case .skippedRecentCheck: line("skipped: last check is younger than --min-interval")
        case .downloadStarted(let id, let version, let bytes, let isDelta):
            state.withLock { $0.totals[id] = bytes }
            line("fetching \(id) \(version) (\(isDelta ? "delta, " : "")\(Self.format(bytes)))")
        case .downloadProgress(let id, let received, let total):
            progress(id: id, received: received, total: total)
        case .deltaFailed(let id, let version, let error):
            line("delta for \(id) \(version) failed, fetching the full archive: \(error)", .warning)
        case .filesFailed(let id, let version, let error):
            line("file-level update of \(id) \(version) failed, fetching a delta or the full archive: \(error)", .warning)
        case .indexDeltaFailed(let id, let version, let error):
            line("file-index delta of \(id) \(version) refused, fetching the full file index: \(error)", .warning)
        case .contentDamaged(let path, let problem): line("damaged held content \(path): \(problem)", .warning)
        case .installed(let id, let version): line("installed \(id) \(version)")
        case .heldBack(let id, let version, let reason): line("held back \(id) \(version): \(reason)")
        case .packageFailed(let id, let error): line("failed \(id): \(error)", .warning)
        case .releaseAvailable(let id, let version, let notes, let mandatory):
            guard notes != nil || mandatory else { return }
            line("release \(id) \(version)\(mandatory ? " (mandatory)" : "")\(notes.map { ": \($0)" } ?? "")")
        case .retryingUncached(let reason):
            line("\(reason); fetching the manifest again past any cache", .warning)
        case .keysUpdated(let from, let to, let removed):
            let path =
                from.map { $0 + 1 == to ? "keys version \(to) verified" : "keys versions \($0 + 1) to \(to) verified in order" }
                ?? "the trust root given is newer"
            line(
                "trusting keys version \(to) (\(path))\(removed.isEmpty ? "" : "; removed keys: " + removed.joined(separator: ", "))"
            )
        case .activated(let generation): line("activated set \(generation)")
        case .reportsSent(let events): line("sent \(events) install report(s)")
        case .reportsNotSent(let events, let reason):
            line("install reports not sent, \(events) kept for the next sync: \(reason)", .warning)
        }
    }

    private func line(_ text: String, _ priority: Output.Priority = .info) {
        if style == .bars { output.errorRaw("\r\u{1B}[K") }
        output.log(text, priority)
    }

    private func progress(id: String, received: Int64, total: Int64) {
        let now = clock.now()
        let draw: String? = state.withLock { state in
            state.received[id] = received
            switch style {
            case .bars:
                guard now.timeIntervalSince(state.lastDraw) > 0.1 || received == total else { return nil }
                state.lastDraw = now
                let done = state.received.values.reduce(0, +)
                let all = max(1, state.totals.values.reduce(0, +))
                let width = 30
                let filled = Int(Double(width) * Double(done) / Double(all))
                return "\r\u{1B}[K[" + String(repeating: "#", count: min(width, filled))
                    + String(repeating: " ", count: max(0, width - filled)) + "] \(Self.format(done)) / \(Self.format(all))"
            case .lines:
                // A line at each quarter, so a log shows movement without a line per chunk.
                let mark = total > 0 ? Int(4 * received / total) : 4
                guard mark > state.lastLineMarks[id, default: 0], mark < 4 else { return nil }
                state.lastLineMarks[id] = mark
                return "\(id): \(Self.format(received)) of \(Self.format(total))"
            case .none:
                return nil
            }
        }
        guard let draw else { return }
        if style == .bars { output.errorRaw(draw) } else { output.info(draw) }
    }

    func finish() {
        if style == .bars { output.errorRaw("\r\u{1B}[K") }
    }

    static func format(_ bytes: Int64) -> String { ByteCount.text(bytes) }
}

extension Output {
    func errorRaw(_ text: String) { sink.standardError(text) }
}
