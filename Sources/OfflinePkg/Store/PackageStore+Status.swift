import FoundationEssentials

/// What `status` shows: the active set, the one before it, recent history and the last check.
public struct StoreStatus: Sendable, Codable {
    public var root: String
    public var active: ActiveSet
    public var previous: ActiveSet?
    /// The last activations, oldest first (at most `Updater.Options.historyLimit`).
    public var history: [HistoryEntry]
    /// Why some or all of the history could not be read; nil when it was read whole.
    public var historyProblem: String?
    public var manifestURL: String?
    public var lastCheck: Date?
    public var acceptedSequence: Int?
    public var heldBack: [HeldBackRelease]
    public var reverted: [String: String]
    public var deviceID: String?
    /// Monitoring (`status --json`, docs/cron.md): the last sync that reached the network, the last that succeeded, how many
    /// failed since, and the last failure.
    public var lastAttempt: Date?
    public var lastSuccess: Date?
    public var consecutiveFailures: Int = 0
    public var lastError: SyncFailure?
    /// `serve --tls`'s certificate and its pin; nil until `serve --tls` first ran on this root.
    public var tls: TLSStatus? = nil
    /// The runtime cache's entries, bytes and counters (docs/protocol.md#the-runtime-cache).
    public var runtime: RuntimeCacheStatus? = nil
    /// What the last activating sync changed: per package how it came ("archive", "delta", "files",
    /// "cache") and the bytes it cost on the network.
    public var lastSync: [PackageChange]? = nil
    /// The files held once by content (`content/`) and their bytes: what the installed trees take on disk,
    /// apart from files a tree from before the content store holds alone.
    public var content: ContentStatus? = nil
    /// Install reports (docs/protocol.md#install-reports): where they go and what waits in the queue; nil when reports are off
    /// and nothing is queued.
    public var reports: ReportsStatus? = nil
    /// What the root trusts to sign each manifest URL's manifests (docs/protocol.md#keys-documents), by URL.
    public var trust: [TrustStatus] = []
}

/// What a root trusts for one manifest URL: a keys document (its version, expiry, keys and thresholds) or
/// fixed keys, remembered from the signed syncs of that URL.
public struct TrustStatus: Sendable, Codable, Equatable {
    public var manifestURL: String
    /// `keys-document` (`--trust-root`) or `keys` (`--trust-key`).
    public var kind: String
    /// The keys version trusted, for a keys document.
    public var keysVersion: Int?
    public var expires: Date?
    /// The root keys' ids and threshold, for a keys document.
    public var rootKeys: [String]?
    public var rootThreshold: Int?
    /// The key ids that may sign manifests, and how many must.
    public var manifestKeys: [String]
    public var manifestThreshold: Int
    /// Key ids that a keys version removed, with that version.
    public var removedKeys: [String: Int]?
    /// When the root first trusted this, or last moved it to a newer keys version.
    public var since: Date
    /// The last rollback baseline a change of the manifest keys reset (fast-forward recovery).
    public var baselineReset: BaselineResetStatus?

    package init(manifestURL: String, record: StoredTrust, anchor: TrustAnchor) {
        self.manifestURL = manifestURL
        let role = anchor.manifestRole
        kind = anchor.document == nil ? "keys" : "keys-document"
        keysVersion = anchor.keysVersion
        expires = anchor.document?.expires
        rootKeys = anchor.document?.root.keyIDs
        rootThreshold = anchor.document?.root.threshold
        manifestKeys = role.keyIDs
        manifestThreshold = role.threshold
        removedKeys = record.removed
        since = record.since
        baselineReset = record.baselineReset.map {
            BaselineResetStatus(keysVersion: $0.keysVersion, sequence: $0.sequence, time: $0.time)
        }
    }
}

/// A rollback baseline dropped because the manifest keys changed.
public struct BaselineResetStatus: Sendable, Codable, Equatable {
    public var keysVersion: Int?
    public var sequence: Int
    public var time: Date
}

extension SyncState {
    /// What the root trusts, URL by URL; a record that does not read is left out.
    package func trustStatus() -> [TrustStatus] {
        (trust ?? [:]).keys.sorted().compactMap { url in
            guard let record = trust?[url], let anchor = try? record.anchor(source: "state") else { return nil }
            return TrustStatus(manifestURL: url, record: record, anchor: anchor)
        }
    }
}

/// How much `content/` holds.
public struct ContentStatus: Sendable, Codable, Equatable {
    public var files: Int
    public var bytes: Int64
}

/// Where `serve --tls`'s certificate is and the pin of its key (docs/protocol.md#the-loopback-server).
public struct TLSStatus: Sendable, Codable, Equatable {
    /// Path of the PEM certificate (WebKitGTK's `allow_tls_certificate_for_host`, an Android network
    /// security config).
    public var certificate: String
    /// Base64 SHA-256 of the key's SubjectPublicKeyInfo: Chromium's `--ignore-certificate-errors-spki-list`.
    public var spkiSHA256: String
}

extension PackageStore {
    public func status() throws -> StoreStatus {
        let record = try ActiveRecord.load(layout)
        let state = try SyncState.load(layout)
        let deviceID = (try? FileSystem.read(layout.deviceID, limit: 1024)).map {
            String(decoding: $0, as: UTF8.self).trimmingWhitespaceAndNewlines()
        }
        let history = History.load(layout)
        var status = StoreStatus(
            root: layout.root, active: record.current, previous: record.previous, history: history.entries,
            historyProblem: history.problem,
            manifestURL: state.manifestURL, lastCheck: state.lastCheck, acceptedSequence: state.acceptedSequence,
            heldBack: state.heldBack ?? [], reverted: state.reverted ?? [:], deviceID: deviceID, lastAttempt: state.lastAttempt,
            lastSuccess: state.lastSuccess, consecutiveFailures: state.consecutiveFailures ?? 0, lastError: state.lastError,
            runtime: RuntimeStore.status(layout))
        let usage = ContentStore(layout: layout).usage()
        status.content = ContentStatus(files: usage.files, bytes: usage.bytes)
        status.lastSync = state.lastChanges
        status.reports = ReportQueue(layout: layout).status
        status.trust = state.trustStatus()
        status.tls = LoopbackCertificate.stored(layout: layout).map { TLSStatus(certificate: $0.certificatePath, spkiSHA256: $0.spkiSHA256) }
        return status
    }
}
