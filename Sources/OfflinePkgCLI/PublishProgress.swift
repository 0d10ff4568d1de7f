import FoundationEssentials
import OfflinePkg
import OfflinePkgPublish
import Synchronization

/// `publish` progress on stderr: a redrawn bar while the archive is packed on a terminal, a line per
/// stage otherwise, nothing with `--quiet` (the same choice as `sync`'s `ProgressReporter`).
final class PublishProgress: Sendable {
    private let style: ProgressReporter.Style
    private let output: Output
    private let clock: WallClock
    private let lastDraw = Mutex<(time: Date, quarter: Int)>((.distantPast, 0))

    init(style: ProgressReporter.Style, output: Output, clock: WallClock) {
        self.style = style
        self.output = output
        self.clock = clock
    }

    func handle(_ event: PublishEvent) {
        switch event {
        case .scanned(let files, let bytes):
            line("packing \(files) file(s), \(ProgressReporter.format(bytes))")
        case .packing(let done, let total):
            packing(done: done, total: total)
        case .writingDelta(let from):
            line("writing the delta from \(from)")
        case .writingManifest(let sequence):
            line("writing the manifest (sequence \(sequence)) and its signature")
        }
    }

    private func packing(done: Int64, total: Int64) {
        let now = clock.now()
        let text: String? = lastDraw.withLock { last in
            switch style {
            case .bars:
                guard now.timeIntervalSince(last.time) > 0.1 || done == total else { return nil }
                last.time = now
                let width = 30
                let filled = total > 0 ? Int(Double(width) * Double(done) / Double(total)) : width
                return "\r\u{1B}[K[" + String(repeating: "#", count: min(width, filled))
                    + String(repeating: " ", count: max(0, width - filled))
                    + "] packed \(ProgressReporter.format(done)) / \(ProgressReporter.format(total))"
            case .lines:
                let quarter = total > 0 ? Int(4 * done / total) : 4
                guard quarter > last.quarter, quarter < 4 else { return nil }
                last.quarter = quarter
                return "packed \(ProgressReporter.format(done)) of \(ProgressReporter.format(total))"
            case .none:
                return nil
            }
        }
        guard let text else { return }
        if style == .bars { output.errorRaw(text) } else { output.info(text) }
    }

    private func line(_ text: String) {
        guard style != .none else { return }
        if style == .bars { output.errorRaw("\r\u{1B}[K") }
        output.info(text)
    }

    func finish() {
        if style == .bars { output.errorRaw("\r\u{1B}[K") }
    }
}
