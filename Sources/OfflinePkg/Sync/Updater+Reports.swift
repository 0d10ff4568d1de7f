import FoundationEssentials

/// Install reports (docs/protocol.md#install-reports) around a sync: the event it makes, queued in the root, then the queue sent
/// in the background. Nothing here can fail a sync or hold it up: the event is written after the switch
/// and its announcement, and the send runs in a task of its own that a caller may wait for
/// (`reportsSent()`, the CLI before it exits) or not (a host).
extension Updater {
    /// Records the event of the sync that ended with `outcome` (an activation or a failure; a sync that
    /// changed nothing makes none), when the manifest names a reports URL and reports are on, then starts
    /// sending the queue. A sync refused for the lock (another one runs) is not a failed release and
    /// reports nothing.
    func recordReport(_ outcome: Result<SyncReport, OfflinePkgError>, attempt: SyncAttempt, started: ContinuousClock.Instant) {
        let queue = ReportQueue(layout: root.layout)
        guard options.reports else { return queue.forget() }
        let progress = attempt.current
        // The manifest this sync accepted says where reports go (or that they go nowhere now); a sync
        // that failed before accepting one reports to where the last accepted manifest said.
        if progress.accepted { queue.target(url: progress.reportsURL, shellVersion: options.shellVersion) }
        let duration = Int((ContinuousClock.now - started) / .milliseconds(1))
        let (shellVersion, root, now) = (options.shellVersion, root.layout.root, root.world.clock.now())
        queue.record { device, _ in
            switch outcome {
            case .success(let report):
                guard report.outcome == .activated else { return nil }
                return ReportEvent(
                    device: device, time: now, event: .activated, sequence: report.sequence,
                    packages: report.changes.map {
                        ReportEvent.Package(id: $0.id, from: $0.from, to: $0.to, via: $0.via?.rawValue, bytes: $0.bytes ?? 0)
                    },
                    exitStatus: 0, durationMs: duration, shellVersion: shellVersion)
            case .failure(let error):
                guard error.category != .locked else { return nil }
                return ReportEvent(
                    device: device, time: now, event: .failed, sequence: progress.sequence,
                    packages: progress.changes.map {
                        ReportEvent.Package(id: $0.id, from: $0.from, to: $0.to, via: nil, bytes: 0)
                    },
                    exitStatus: error.category.exitStatus, error: ReportEvent.sanitized("\(error)", root: root),
                    durationMs: duration, shellVersion: shellVersion)
            }
        }
        startSending()
    }

    /// Sends the queue in a task of its own, unless a send is in flight already (what it misses goes at
    /// the next sync).
    private func startSending() {
        guard sending == nil, ReportQueue(layout: root.layout).loadState() != nil else { return }
        let sender = ReportSender(transport: root.world.transport, caBundle: options.caBundle)
        let (queue, events, clock) = (ReportQueue(layout: root.layout), options.events, root.world.clock)
        sending = Task.detached { [weak self] in
            switch await sender.sendQueued(queue, now: clock.now) {
            case .nothingQueued: break
            case .sent(let count): events?(.reportsSent(events: count))
            case .notSent(let count, let reason): events?(.reportsNotSent(events: count, reason: reason))
            }
            await self?.sendingEnded()
        }
    }

    private func sendingEnded() { sending = nil }

    /// Waits for the install reports' send in flight, if any (at most its 10 s deadline). The CLI calls
    /// this after printing a sync's result, so the process does not end mid-send; cancelling the caller
    /// cancels the send.
    public func reportsSent() async {
        guard let sending else { return }
        await withTaskCancellationHandler {
            await sending.value
        } onCancel: {
            sending.cancel()
        }
    }
}
