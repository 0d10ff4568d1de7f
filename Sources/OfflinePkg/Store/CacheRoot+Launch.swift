import FoundationEssentials

/// What `recordLaunch` decided.
public enum LaunchDecision: Sendable, Equatable {
    /// The active set is confirmed (or nothing is installed): nothing to do.
    case confirmed
    /// The active set awaits confirmation; this is launch number `launch` of it.
    case awaitingConfirmation(generation: Int, launch: Int)
    /// The active set was never confirmed and has been reverted; `to` is the generation now active.
    case reverted(from: Int, to: Int)
}

extension CacheRoot {
    /// Call once per shell launch, before loading content. Counts the launch of an unconfirmed set and
    /// reverts it when it has had `launchesBeforeRevert` launches without a confirmation.
    @discardableResult
    public func recordLaunch() throws -> LaunchDecision {
        let limit = launchesBeforeRevert
        let record = try ActiveRecord.load(layout)
        let generation = record.current.generation
        guard limit > 0, generation > 0 else { return .confirmed }
        // A set a rollback restored has only the release it left to fall back to: it stands.
        if record.previousWasRolledBack == true { return .confirmed }
        var launch = LaunchRecord.load(layout) ?? LaunchRecord(generation: generation, launches: 0, confirmed: false)
        if launch.generation != generation {
            // The very first set has nothing to fall back to; count it as confirmed.
            launch = LaunchRecord(generation: generation, launches: 0, confirmed: record.previous == nil)
        }
        if launch.confirmed {
            try launch.save(layout)
            return .confirmed
        }
        if launch.launches >= limit, record.previous != nil {
            let restored = try rollback(cause: .launchNotConfirmed)
            try LaunchRecord(generation: restored.generation, launches: 1, confirmed: true).save(layout)
            return .reverted(from: generation, to: restored.generation)
        }
        launch.launches += 1
        try launch.save(layout)
        return .awaitingConfirmation(generation: generation, launch: launch.launches)
    }

    /// Confirms that the set `generation` launched well. A confirmation counts only for the set it
    /// names: one for an older generation does nothing.
    ///
    /// The first confirmation of a set is an install report's `confirmed` event (docs/protocol.md#install-reports).
    public func confirmLaunch(generation: Int) throws {
        let record = try ActiveRecord.load(layout)
        guard generation == record.current.generation else { return }
        let stored = LaunchRecord.load(layout).flatMap { $0.generation == generation ? $0 : nil }
        var launch = stored ?? LaunchRecord(generation: generation, launches: 0, confirmed: true)
        launch.confirmed = true
        try launch.save(layout)
        guard stored?.confirmed != true, generation > 0 else { return }
        ReportQueue(layout: layout).record { device, state in
            ReportEvent(
                device: device, time: world.clock.now(), event: .confirmed, sequence: record.current.sequence,
                packages: ReportEvent.packages(from: record.previous ?? .empty, to: record.current),
                shellVersion: state.shellVersion)
        }
    }
}
