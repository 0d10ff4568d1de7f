import FoundationEssentials
import Synchronization

/// What a sync asks beside the manifest, from what the device holds, so that a device behind does not
/// wait for the manifest to ask it, a round trip on a slow link (docs/protocol.md#file-index-deltas): the
/// newest file-index delta from each active tree (`FileIndexDelta.newestURL`), named from the index URL
/// of the manifest last accepted. What comes is a guess until the new manifest arrives: it is used when
/// it stands for the index that manifest names, and checked then like any delta (the tree it gives
/// against the signed tree hash); else it is dropped, and the delta is fetched by its full name in the
/// same sync. A stale copy (a CDN edge, a publish in between) costs the round trip saved, never
/// correctness.
///
/// How the origin takes ranges is not asked here: a caching edge answers an object it holds (several
/// ranges, 206) otherwise than one it must fetch (200), so the last archive's answer does not tell the
/// new one's.
package final class EarlyRequests: Sendable {
    /// What one early delta fetch brought: its name (as the stored manifest's index URL places it), the
    /// compressed bytes (nil: not there, or not read), and the bytes that crossed the network.
    package struct Fetched: Sendable {
        package var name: String
        package var bytes: [UInt8]?
        package var spent: Int64
    }

    private let deltas: [String: Task<Fetched, Never>]
    private let gate: Gate

    /// None: what a dry run, a repair, or a device with nothing to start from has.
    package static let none = EarlyRequests(deltas: [:], gate: Gate(count: 0))

    private init(deltas: [String: Task<Fetched, Never>], gate: Gate) {
        self.deltas = deltas
        self.gate = gate
    }

    /// Starts the early requests of `installer`'s packages: for each package active in `current` whose
    /// entry in `stored` (the manifest last accepted) has a file index on an origin not known to serve
    /// no ranges. A delta is read up to the stored index's size (one is written only when smaller than
    /// its index), at least 64 KiB.
    package static func start(_ installer: PackageInstaller, stored: Manifest, manifestURL: URL, current: ActiveSet)
        -> EarlyRequests
    {
        var deltas = [String: Task<Fetched, Never>]()
        let gate = Gate(count: current.packages.count)
        defer { gate.pass(current.packages.count - deltas.count) }
        for package in current.packages {
            guard let entry = stored.packages.first(where: { $0.id == package.id }),
                installer.filesReference(entry, manifestURL: manifestURL) != nil, let reference = entry.archive.files
            else { continue }
            let fetcher = FileFetcher(
                layout: installer.layout, downloader: installer.downloader, limits: installer.limits, origins: installer.origins)
            let name = FileIndexDelta.newestURL(nextTo: reference.url, fromTree: package.tree)
            guard let url = try? ManifestLocation.resolve(name, against: manifestURL) else { continue }
            let cap = max(reference.size, 64 << 10)
            deltas[package.id] = Task {
                gate.pass()
                let counted = ProgressCounter()
                let bytes = try? await fetcher.fetchIfPresent(url, name: name, cap: cap, counted: counted)
                return Fetched(name: name, bytes: bytes ?? nil, spent: counted.total)
            }
        }
        return EarlyRequests(deltas: deltas, gate: gate)
    }

    /// Once every early fetch runs: its request is then on its way (a transfer is handed to the
    /// transport without waiting), so it goes beside the manifest, however busy the machine's threads.
    package func started() async { await gate.wait() }

    /// What the early delta fetch for `id` brought, once it ends; nil when there was none.
    package func delta(_ id: String) async -> Fetched? { await deltas[id]?.value }

    /// Stops what still runs (a sync that ends before it installs).
    package func cancel() {
        for task in deltas.values { task.cancel() }
    }
}

/// Opens once `count` passes are made.
private final class Gate: Sendable {
    private let state: Mutex<(left: Int, waiting: [CheckedContinuation<Void, Never>])>

    init(count: Int) { state = Mutex((count, [])) }

    func pass(_ count: Int = 1) {
        guard count > 0 else { return }
        let opened = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.left -= count
            guard state.left <= 0 else { return [] }
            defer { state.waiting = [] }
            return state.waiting
        }
        for waiting in opened { waiting.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let open = state.withLock { state -> Bool in
                if state.left <= 0 { return true }
                state.waiting.append(continuation)
                return false
            }
            if open { continuation.resume() }
        }
    }
}
