import FoundationEssentials

/// What a cache root remembers between syncs about the manifest: validators for conditional requests,
/// the accepted sequence for rollback protection, and the inputs the stored manifest was judged with.
package struct SyncState: Codable, Sendable, Equatable {
    package var manifestURL: String?
    package var etag: String?
    package var lastModified: String?
    /// When the manifest was last checked successfully (200 or 304).
    package var lastCheck: Date?
    /// The highest sequence accepted, and the sha256 of the manifest bytes accepted with it.
    package var acceptedSequence: Int?
    package var acceptedManifestSHA256: String?
    /// The local inputs the stored manifest was last evaluated with; a 304 re-evaluates when they change.
    package var evaluatedInputs: String?
    /// What the last evaluated manifest offered that this device did not take, and why.
    package var heldBack: [HeldBackRelease]?
    /// Releases rolled back (by hand or for want of a launch confirmation): package id → version.
    /// A sync holds these back until the manifest offers another version of the package.
    package var reverted: [String: String]?
    /// Of `reverted`, the releases `rollback` left by hand (the rest were reverted for want of a launch
    /// confirmation): package id → version. Only what a held-back release is told depends on it.
    package var rolledBack: [String: String]?
    /// Rollback protection per manifest URL (docs/protocol.md#sequence-expiry-and-channels): moving a device from a staging to a
    /// production repository is not a rollback; coming back to a URL compares with what it accepted there.
    package var channels: [String: AcceptedManifest]?
    /// Monitoring (`status --json`, docs/cron.md): written by every sync, failed ones included.
    package var lastAttempt: Date?
    package var lastSuccess: Date?
    package var consecutiveFailures: Int?
    package var lastError: SyncFailure?
    /// What the last activating sync changed, how each package came and its bytes (`status`).
    package var lastChanges: [PackageChange]?
    /// What the root trusts per manifest URL (docs/protocol.md#keys-documents): kept here, in the file that
    /// holds the rollback baselines, so that one atomic write changes a URL's trust and its baseline
    /// together.
    package var trust: [String: StoredTrust]?

    package init() {}

    package static func load(_ layout: CacheLayout) throws -> SyncState {
        var state = try JSONCoding.load(SyncState.self, from: layout.state) ?? SyncState()
        state.forgetUserinfo()
        return state
    }

    /// A state written before URLs were kept without userinfo (docs/protocol.md#neighbours-on-the-device): its URLs as they are kept now,
    /// each channel's history kept (the highest sequence, where two URLs become one).
    private mutating func forgetUserinfo() {
        manifestURL = manifestURL.map { Userinfo.removed(from: $0) }
        guard let kept = channels, kept.keys.contains(where: { $0.contains("@") }) else { return }
        var merged = [String: AcceptedManifest]()
        for (url, record) in kept {
            let key = Userinfo.removed(from: url)
            if let other = merged[key], other.sequence >= record.sequence { continue }
            merged[key] = record
        }
        channels = merged
    }

    /// Writes the state atomically; `durable: false` leaves out the two flushes, for a state whose
    /// changes a power cut may take (`FileSystem.writeAtomically`).
    package func save(_ layout: CacheLayout, durable: Bool = true) throws {
        try FileSystem.writeAtomically(stateJSON.text, to: layout.state, durable: durable)
    }

    /// What was last accepted from `url`. A state written before channels were kept has only the
    /// top-level fields, which belong to `manifestURL`.
    package func accepted(from url: String) -> AcceptedManifest? {
        if let record = channels?[url] { return record }
        guard manifestURL == url, let acceptedSequence else { return nil }
        return AcceptedManifest(sequence: acceptedSequence, sha256: acceptedManifestSHA256)
    }

    package mutating func accept(_ record: AcceptedManifest, from url: String) {
        manifestURL = url
        acceptedSequence = record.sequence
        acceptedManifestSHA256 = record.sha256
        channels = (channels ?? [:]).merging([url: record]) { $1 }
    }
}

/// The manifest a device last accepted from one URL: the rollback baseline.
package struct AcceptedManifest: Codable, Sendable, Equatable {
    package var sequence: Int
    package var sha256: String?
    /// The keys version the manifest named, when it was accepted under a keys document
    /// (docs/protocol.md#keys-documents).
    package var keysVersion: Int? = nil
    /// The manifest keys and threshold it was accepted under (`KeysDocument.Role.fingerprint`); nil when
    /// unsigned, or accepted by a build that did not record them. Under other manifest keys the sequence
    /// is no baseline: the keys that signed it may be the leaked ones a rotation removed.
    package var manifestKeys: String? = nil

    package init(sequence: Int, sha256: String?, keysVersion: Int? = nil, manifestKeys: String? = nil) {
        self.sequence = sequence
        self.sha256 = sha256
        self.keysVersion = keysVersion
        self.manifestKeys = manifestKeys
    }
}

/// The last failed sync of a root, as `status --json` shows it.
public struct SyncFailure: Codable, Sendable, Equatable {
    public var time: Date
    /// The exit status the `sync` command ended with (docs/protocol.md#exit-statuses; 130/143 for SIGINT/SIGTERM).
    public var exitStatus: Int32
    public var message: String

    public init(time: Date, exitStatus: Int32, message: String) {
        self.time = time
        self.exitStatus = exitStatus
        self.message = message
    }
}

extension SyncState {
    /// A failed attempt: counted (unless `counted` is false: an interruption), and its error kept for `status`.
    package mutating func note(_ failure: SyncFailure, counted: Bool = true) {
        lastAttempt = failure.time
        if counted { consecutiveFailures = (consecutiveFailures ?? 0) + 1 }
        lastError = failure
    }

    /// A finished sync: the failure count starts over; the last error stays visible as history.
    package mutating func noteSuccess(at time: Date) {
        lastSuccess = time
        consecutiveFailures = 0
    }

    /// Notes a failed sync in `layout`'s state (attempt time, failure count, the error) and nothing
    /// else: never the active set, the accepted sequence or the validators. Takes the root lock without
    /// waiting; when another sync holds it, that sync's own outcome is what the state will show.
    package static func recordFailure(_ failure: SyncFailure, counted: Bool = true, in layout: CacheLayout) {
        guard FileSystem.isDirectory(layout.root), let lock = try? RootLock(layout: layout, wait: false) else { return }
        withExtendedLifetime(lock) {
            guard var state = try? SyncState.load(layout) else { return }
            state.note(failure, counted: counted)
            try? state.save(layout)
        }
    }
}

extension OfflinePkgError.Category {
    /// The exit status of docs/protocol.md#exit-statuses for this kind of failure.
    public var exitStatus: Int32 {
        switch self {
        case .failure: 1
        case .usage: 2
        case .locked: 3
        case .refused: 4
        }
    }
}
