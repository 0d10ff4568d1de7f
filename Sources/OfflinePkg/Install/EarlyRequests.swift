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
/// Almost every sync finds nothing new (a 304), so an early request must cost that sync nothing. It is
/// made only when all of these hold: the manifest's origin answered its last manifest over HTTP/2 (or
/// 3), remembered in `OriginRanges`, so the request is one more stream on the manifest's connection and
/// never a second connection and TLS handshake; the delta is on that same origin; the manifest has not
/// answered within `delay` (a fast link's answer comes first and nothing early is sent); and the package
/// is among the first `maximumPackages` active ones with a file index. A 304 stops what was started.
///
/// How the origin takes ranges is not asked here: a caching edge answers an object it holds (several
/// ranges, 206) otherwise than one it must fetch (200), so the last archive's answer does not tell the
/// new one's.
package final class EarlyRequests: Sendable {
    /// What one early delta fetch brought: its name (as the stored manifest's index URL places it), the
    /// compressed bytes (nil: not there, not read, or not asked), and the bytes that crossed the network.
    package struct Fetched: Sendable {
        package var name: String
        package var bytes: [UInt8]?
        package var spent: Int64
    }

    /// How long the manifest may take before the early requests go: longer than a near origin's answer
    /// (a few milliseconds to tens), so the common no-op sync sends nothing early, and short beside the
    /// round trip they save on a slow link (150 ms and more), which keeps most of the saving.
    package static let delay: Duration = .milliseconds(50)
    /// The packages asked for early, at most: each is a request (a 404 when it has no new release), and
    /// an update of many packages waits on the bulk of its downloads more than on one round trip.
    package static let maximumPackages = 4

    private let deltas: [String: Task<Fetched, Never>]

    /// None: what a dry run, a repair, or a device with nothing to start from has.
    package static let none = EarlyRequests(deltas: [:])

    private init(deltas: [String: Task<Fetched, Never>]) {
        self.deltas = deltas
    }

    /// Starts the early requests of `installer`'s packages: for each of the first `maximumPackages`
    /// packages active in `current` whose entry in `stored` (the manifest last accepted) has a file index
    /// on the manifest's origin, when `origins` remembers that origin answering over HTTP/2. Each waits
    /// `delay`, and is not made when `answer` has come by then; a 304 cancels those made. A delta is
    /// read up to the stored index's size (one is written only when smaller than its index), at least
    /// 64 KiB.
    package static func start(
        _ installer: PackageInstaller, stored: Manifest, manifestURL: URL, current: ActiveSet, origins: OriginRanges,
        answer: ManifestAnswer
    ) -> EarlyRequests {
        guard mayStart(manifestURL: manifestURL, origins: origins), let manifestOrigin = OriginRanges.key(manifestURL)
        else { return .none }
        var deltas = [String: Task<Fetched, Never>]()
        for package in current.packages where deltas.count < maximumPackages {
            guard let entry = stored.packages.first(where: { $0.id == package.id }),
                installer.filesReference(entry, manifestURL: manifestURL) != nil, let reference = entry.archive.files
            else { continue }
            let fetcher = FileFetcher(
                layout: installer.layout, downloader: installer.downloader, limits: installer.limits, origins: installer.origins)
            let name = FileIndexDelta.newestURL(nextTo: reference.url, fromTree: package.tree)
            guard let url = try? ManifestLocation.resolve(name, against: manifestURL), OriginRanges.key(url) == manifestOrigin
            else { continue }
            let cap = max(reference.size, 64 << 10)
            deltas[package.id] = Task {
                let unasked = Fetched(name: name, bytes: nil, spent: 0)
                guard (try? await Task.sleep(for: delay)) != nil, answer.status == nil, !Task.isCancelled else { return unasked }
                let counted = ProgressCounter()
                let bytes = try? await fetcher.fetchIfPresent(url, name: name, cap: cap, counted: counted)
                return Fetched(name: name, bytes: bytes ?? nil, spent: counted.total)
            }
        }
        let early = EarlyRequests(deltas: deltas)
        answer.onAnswer { status in if status == 304 { early.cancel() } }
        return early
    }

    /// Whether early requests may go to the manifest's origin: it answered the last manifest over a
    /// protocol that multiplexes. Asked before the stored manifest is read, which costs a sync over
    /// HTTP/1.1 a parse it would not use.
    package static func mayStart(manifestURL: URL, origins: OriginRanges) -> Bool {
        origins.http(for: manifestURL).map(Self.multiplexes) == true
    }

    /// Whether `http` (an ALPN name) carries several requests on one connection.
    private static func multiplexes(_ http: String) -> Bool { http == "h2" || http == "h3" }

    /// What the early delta fetch for `id` brought, once it ends; nil when there was none.
    package func delta(_ id: String) async -> Fetched? { await deltas[id]?.value }

    /// Stops what still runs or waits (a sync that ends before it installs, a 304).
    package func cancel() {
        for task in deltas.values { task.cancel() }
    }
}

/// The status of the manifest's first answer in a sync, as soon as its head arrives, and who waits on it.
package final class ManifestAnswer: Sendable {
    private let state = Mutex<(status: Int?, listeners: [@Sendable (Int) -> Void])>((nil, []))

    package init() {}

    /// The status of the first answer; nil until one came.
    package var status: Int? { state.withLock { $0.status } }

    /// Tells the listeners of the first answer; later ones (a retry) change nothing.
    package func answered(_ status: Int) {
        let listeners = state.withLock { state -> [@Sendable (Int) -> Void] in
            guard state.status == nil else { return [] }
            state.status = status
            defer { state.listeners = [] }
            return state.listeners
        }
        for listener in listeners { listener(status) }
    }

    /// Calls `listener` with the first answer's status: at once when it came already.
    package func onAnswer(_ listener: @escaping @Sendable (Int) -> Void) {
        let status = state.withLock { state -> Int? in
            if state.status == nil { state.listeners.append(listener) }
            return state.status
        }
        if let status { listener(status) }
    }
}
