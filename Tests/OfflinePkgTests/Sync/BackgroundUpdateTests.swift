import Foundation
import OfflinePkgTestSupport
import Synchronization
import Testing

@testable import OfflinePkg

/// `Updater.start()` / `stop()`: the background loop turns, and stops when told, however soon.
@Suite("Background updates")
struct BackgroundUpdateTests {
    /// Counts the syncs an updater runs, by the one event each of them sends: by default the check of
    /// the manifest or its skip.
    final class SyncCounter: Sendable {
        private let counts: @Sendable (SyncEvent) -> Bool
        private let count = Mutex(0)
        private let onSync = Mutex<(@Sendable (Int) -> Void)?>(nil)

        init(counting counts: @escaping @Sendable (SyncEvent) -> Bool = SyncCounter.checks) {
            self.counts = counts
        }

        static func checks(_ event: SyncEvent) -> Bool {
            switch event {
            case .checking, .skippedRecentCheck: true
            default: false
            }
        }

        static func failures(_ event: SyncEvent) -> Bool {
            if case .failed = event { true } else { false }
        }

        var value: Int { count.withLock { $0 } }

        /// Calls `action` with the running count at each counted event, on the sync's thread.
        func whenCounted(_ action: @escaping @Sendable (Int) -> Void) { onSync.withLock { $0 = action } }

        func handle(_ event: SyncEvent) {
            guard counts(event) else { return }
            let value = count.withLock {
                $0 += 1
                return $0
            }
            onSync.withLock { $0 }?(value)
        }
    }

    /// An updater whose background period is `period`: the floor of a minute lifted.
    static func updater(_ manifest: URL, _ store: PackageStore, period: TimeInterval, counter: SyncCounter) -> Updater {
        Updater(
            store: store, manifestURL: manifest, options: .init(minInterval: period, events: { counter.handle($0) }),
            world: .live, minimumPeriod: 0)
    }

    /// Waits in steps of 20 ms, at most `steps` of them, until `done`. Steps rather than the clock: when
    /// other tests tie up the cooperative pool (blocking on child processes), the updater's loop and these
    /// steps slow down together, so a starved run waits longer instead of failing.
    static func wait(steps: Int, until done: () -> Bool = { false }) async throws {
        for _ in 0..<steps where !done() { try await Task.sleep(nanoseconds: 20_000_000) }
    }

    @Test func theLoopSyncsEveryPeriodAndNoMoreOnceStopped() async throws {
        let repo = try LifecycleTests.repo()
        let counter = SyncCounter()
        let updater = Self.updater(
            URL(fileURLWithPath: repo.manifestPath), try LifecycleTests.store(try TemporaryDirectory()), period: 0.2,
            counter: counter)
        // Stopped from inside the third sync: that sync finishes, and no fourth may begin.
        let times = Mutex<[ContinuousClock.Instant]>([])
        counter.whenCounted { count in
            times.withLock { $0.append(.now) }
            if count == 3 { updater.stop() }
        }
        updater.start()
        try await Self.wait(steps: 500) { counter.value >= 3 }  // 10 s; about 0.5 s on an idle machine
        #expect(counter.value == 3)
        try await Self.wait(steps: 50)  // five periods
        #expect(counter.value == 3)
        // Each turn waits its period (a load can only make the gaps longer).
        let checks = times.withLock { $0 }
        for (earlier, later) in zip(checks, checks.dropFirst()) {
            #expect(later - earlier >= .milliseconds(190), "syncs \(later - earlier) apart, the period is 0.2 s")
        }
    }

    @Test func aStopRightAfterStartEndsTheLoop() async throws {
        // A stop() that only asked the actor to stop the loop could get there before its start(), find
        // nothing to stop, and leave the loop running for good. That is rare, so 40,000 pairs go at
        // once, half from concurrent tasks: before the fix, every one of 17 runs left 3 to 686 running.
        // Each syncs a manifest that is not there: a sync that fails at once, with one failed event.
        let store = try LifecycleTests.store(try TemporaryDirectory())
        let counters = (0..<40_000).map { _ in SyncCounter(counting: SyncCounter.failures) }
        let updaters = counters.map {
            Self.updater(URL(fileURLWithPath: "/nonexistent/manifest.json"), store, period: 0.1, counter: $0)
        }
        // Half from this task, half from a group of tasks at the same time.
        async let fromTasks: Void = withTaskGroup(of: Void.self) { group in
            for updater in updaters[20_000...] {
                group.addTask {
                    updater.start()
                    updater.stop()
                }
            }
        }
        for updater in updaters[..<20_000] {
            updater.start()
            updater.stop()
        }
        await fromTasks
        try await Self.wait(steps: 40)  // eight periods
        // A start may have begun its first sync before its stop; never a second.
        #expect(counters.filter { $0.value > 1 }.count == 0)
        withExtendedLifetime(updaters) {}
    }

    /// Each turn of the loop waits its period plus a random 0...jitter: with a period of 0.05 s and a
    /// jitter of 10^6 s, a second sync within a second would be a 1-in-a-million draw.
    @Test func theLoopWaitsItsJitterBetweenSyncs() async throws {
        let repo = try LifecycleTests.repo()
        let counter = SyncCounter()
        let updater = Updater(
            store: try LifecycleTests.store(try TemporaryDirectory()), manifestURL: URL(fileURLWithPath: repo.manifestPath),
            options: .init(minInterval: 0.05, jitter: 1_000_000, events: { counter.handle($0) }), world: .live,
            minimumPeriod: 0)
        updater.start()
        defer { updater.stop() }
        try await Self.wait(steps: 500) { counter.value >= 1 }
        try await Self.wait(steps: 50)  // a second: twenty periods without the jitter
        #expect(counter.value == 1)
    }

    /// The loop holds its updater only while it syncs: one released without `stop()` goes away and syncs
    /// no more.
    @Test func aReleasedUpdaterIsNotKeptAliveByItsLoop() async throws {
        let repo = try LifecycleTests.repo()
        let counter = SyncCounter()
        let store = try LifecycleTests.store(try TemporaryDirectory())
        weak var released: Updater?
        do {
            let updater = Self.updater(URL(fileURLWithPath: repo.manifestPath), store, period: 0.2, counter: counter)
            released = updater
            updater.start()
            try await Self.wait(steps: 500) { counter.value >= 1 }
        }
        try await Self.wait(steps: 500) { released == nil }
        #expect(released == nil, "the background loop keeps the updater alive")
        let syncs = counter.value
        try await Self.wait(steps: 50)  // five periods
        #expect(counter.value == syncs)
    }
}
