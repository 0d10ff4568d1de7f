import FoundationEssentials
import OfflinePkg

/// What `reports show` says about a fleet (docs/protocol.md#install-reports), worked out in one pass over the stored events in
/// the order they happened.
///
/// - **devices** on a version: devices whose last event that names the package left them on it — the
///   version activated, restored by a revert or confirmed, or for a failed sync the version it kept
///   (`from`). All events count, however old: a device reports only when something happens.
/// - **activated / failed / reverted / confirmed**: devices that did so within the window (`--days`),
///   each device once per version; a revert counts against the version left. `events` has the raw counts.
/// - **failure rate**: failed devices over devices that tried the version (activated or failed);
///   **revert rate**: reverted over activated.
/// - **adoption**: devices per version at evenly spaced times across the window's events, up to now.
/// - **bytes** by way (files, delta, archive) that activations of the version cost, within the window.
package struct FleetSummary: Sendable, Codable, Equatable {
    package var generatedAt: String
    package var days: Int
    /// Start of the window.
    package var since: String
    /// Devices that ever reported, and events stored.
    package var devices: Int
    package var events: Int
    package var packages: [PackageSummary]
    /// Failed syncs that name no package (before a plan: a refused manifest, no network), commonest first.
    package var errors: [ErrorCount]

    package struct PackageSummary: Sendable, Codable, Equatable {
        package var id: String
        /// In the order the fleet first saw them.
        package var versions: [VersionSummary]
        package var adoption: Adoption
    }

    package struct VersionSummary: Sendable, Codable, Equatable {
        package var version: String
        package var devices: Int
        package var activated: Int
        package var failed: Int
        package var reverted: Int
        package var confirmed: Int
        package var failureRate: Double?
        package var revertRate: Double?
        /// The commonest errors of failed syncs to this version, commonest first.
        package var errors: [ErrorCount]
        package var bytes: WayBytes
        package var events: EventCounts
    }

    package struct ErrorCount: Sendable, Codable, Equatable {
        package var error: String
        package var count: Int
    }

    package struct WayBytes: Sendable, Codable, Equatable {
        package var files: Int64 = 0
        package var delta: Int64 = 0
        package var archive: Int64 = 0
    }

    package struct EventCounts: Sendable, Codable, Equatable {
        package var activated = 0
        package var failed = 0
        package var reverted = 0
        package var confirmed = 0
    }

    /// Devices per version at `points`' times, `step` seconds apart.
    package struct Adoption: Sendable, Codable, Equatable {
        package var step: Int
        package var points: [Point]

        package struct Point: Sendable, Codable, Equatable {
            package var time: String
            /// Version → devices on it then (versions with none left out).
            package var devices: [String: Int]
        }
    }

    /// Errors listed per version.
    static let errorsListed = 5
    /// The chart's steps: the finest that spreads the window's events over at most `maximumPoints`.
    static let steps = [1, 5, 15, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86_400, 7 * 86_400]
    static let maximumPoints = 60

    /// The summary of `database`'s events, the window being the `days` before `now`.
    package static func make(_ database: ReportsDatabase, days: Int, now: Date? = nil) throws -> FleetSummary {
        let now = now ?? database.clock.now()
        var rows = [ReportsDatabase.Row]()
        try database.eachRow { rows.append($0) }
        return make(rows, days: days, now: now)
    }

    static func make(_ rows: [ReportsDatabase.Row], days: Int, now: Date) -> FleetSummary {
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let windowStart = nowMs - Int64(days) * 86_400_000
        var tally = Tally()
        // The chart runs from the window's first event (or its start) to now.
        let firstInWindow = rows.first { $0.timeMs >= windowStart }?.timeMs ?? nowMs
        let span = max(0, nowMs - firstInWindow) / 1000
        let step = steps.first { span / Int64($0) < Int64(maximumPoints) } ?? steps.last!
        var nextPoint = firstInWindow
        var eventIDs = Set<Int64>()
        for row in rows {
            while row.timeMs > nextPoint && nextPoint <= nowMs && row.timeMs >= windowStart {
                tally.snapshot(at: nextPoint)
                nextPoint += Int64(step) * 1000
            }
            eventIDs.insert(row.eventID)
            tally.add(row, inWindow: row.timeMs >= windowStart)
        }
        while nextPoint <= nowMs {
            tally.snapshot(at: nextPoint)
            nextPoint += Int64(step) * 1000
        }
        if tally.lastSnapshot != nowMs { tally.snapshot(at: nowMs) }
        return FleetSummary(
            generatedAt: ReportTime.format(now), days: days,
            since: ReportTime.format(Date(timeIntervalSince1970: Double(windowStart) / 1000)),
            devices: tally.devices.count, events: eventIDs.count,
            packages: tally.packages(step: step), errors: Tally.commonest(tally.errorsWithoutPackage, limit: 10))
    }
}

/// The running counts of `FleetSummary.make`.
private struct Tally {
    struct VersionStats {
        var activated = Set<String>()
        var failed = Set<String>()
        var reverted = Set<String>()
        var confirmed = Set<String>()
        var events = FleetSummary.EventCounts()
        var errors = [String: Int]()
        var bytes = FleetSummary.WayBytes()
    }

    var devices = Set<String>()
    /// Device → package → the version it is on now.
    var current = [String: [String: String]]()
    /// Package → version → devices on it now.
    var counts = [String: [String: Int]]()
    var stats = [String: [String: VersionStats]]()
    var order = [String: [String]]()
    var points = [String: [FleetSummary.Adoption.Point]]()
    var errorsWithoutPackage = [String: Int]()
    var lastSnapshot: Int64 = .min

    mutating func see(_ package: String, _ version: String?) {
        guard let version, !(order[package]?.contains(version) ?? false) else { return }
        order[package, default: []].append(version)
    }

    mutating func add(_ row: ReportsDatabase.Row, inWindow: Bool) {
        devices.insert(row.device)
        guard let package = row.package else {
            if inWindow, row.event == .failed { errorsWithoutPackage[row.error ?? "(no message)", default: 0] += 1 }
            return
        }
        see(package, row.from)
        see(package, row.to)
        let after = row.event == .failed ? row.from : row.to
        let before = current[row.device]?[package]
        if before != after {
            if let before { counts[package, default: [:]][before, default: 0] -= 1 }
            if let after { counts[package, default: [:]][after, default: 0] += 1 }
            current[row.device, default: [:]][package] = after
        }
        guard inWindow else { return }
        switch row.event {
        case .activated:
            guard let to = row.to else { return }
            stats[package, default: [:]][to, default: .init()].activated.insert(row.device)
            stats[package]![to]!.events.activated += 1
            switch row.via {
            case "files": stats[package]![to]!.bytes.files += row.bytes
            case "delta": stats[package]![to]!.bytes.delta += row.bytes
            case "archive": stats[package]![to]!.bytes.archive += row.bytes
            default: break
            }
        case .failed:
            guard let to = row.to else { return }
            stats[package, default: [:]][to, default: .init()].failed.insert(row.device)
            stats[package]![to]!.events.failed += 1
            stats[package]![to]!.errors[row.error ?? "(no message)", default: 0] += 1
        case .reverted:
            guard let from = row.from else { return }
            stats[package, default: [:]][from, default: .init()].reverted.insert(row.device)
            stats[package]![from]!.events.reverted += 1
        case .confirmed:
            guard let to = row.to else { return }
            stats[package, default: [:]][to, default: .init()].confirmed.insert(row.device)
            stats[package]![to]!.events.confirmed += 1
        }
    }

    mutating func snapshot(at time: Int64) {
        lastSnapshot = time
        let text = ReportTime.format(Date(timeIntervalSince1970: Double(time) / 1000))
        for (package, versions) in counts {
            points[package, default: []].append(.init(time: text, devices: versions.filter { $0.value > 0 }))
        }
    }

    func packages(step: Int) -> [FleetSummary.PackageSummary] {
        order.keys.sorted().map { id in
            let versions = (order[id] ?? []).map { version -> FleetSummary.VersionSummary in
                let stats = self.stats[id]?[version] ?? VersionStats()
                let tried = stats.activated.union(stats.failed).count
                return FleetSummary.VersionSummary(
                    version: version, devices: counts[id]?[version] ?? 0, activated: stats.activated.count,
                    failed: stats.failed.count, reverted: stats.reverted.count, confirmed: stats.confirmed.count,
                    failureRate: tried > 0 ? Self.rate(stats.failed.count, tried) : nil,
                    revertRate: stats.activated.isEmpty ? nil : Self.rate(stats.reverted.count, stats.activated.count),
                    errors: Self.commonest(stats.errors, limit: FleetSummary.errorsListed), bytes: stats.bytes,
                    events: stats.events)
            }
            return FleetSummary.PackageSummary(id: id, versions: versions, adoption: .init(step: step, points: points[id] ?? []))
        }
    }

    static func rate(_ part: Int, _ whole: Int) -> Double { (Double(part) / Double(whole) * 10_000).rounded() / 10_000 }

    static func commonest(_ counts: [String: Int], limit: Int) -> [FleetSummary.ErrorCount] {
        counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.prefix(limit).map {
            FleetSummary.ErrorCount(error: $0.key, count: $0.value)
        }
    }
}
