import FoundationEssentials
import Synchronization

/// How an origin answers `Range` requests (SPEC §13), as file-level updates found out.
package enum RangeSupport: String, Codable, Sendable {
    /// Several ranges a request, in one 206 `multipart/byteranges` answer (nginx, Apache, most static
    /// servers).
    case multipart
    /// One range a request: several asked get the whole file (S3, GCS, R2), a 416 (OSS) or one part.
    case single
    /// No ranges: one range asked gets the whole file.
    case none
}

/// What the root remembers of the origins file-level updates fetched from (`origins.json`, 0600, one
/// record per `scheme://host:port`), so the next sync starts in the origin's mode instead of finding it
/// out again: on an origin that answers one range a request, the finding costs a request whose whole-
/// file answer is cut off at its head. A record is found out again when it is a week old (a repository
/// moves to other hosting under the same name), when an answer contradicts it (several ranges refused
/// where they were served), and when the origin answers with another `Server` header (another server
/// behind the name). A repository moved to another host is another origin, found out afresh.
///
/// A record also keeps the protocol the manifest's last answer came over (`http`), so that a sync knows
/// before it asks whether one more request would ride the manifest's connection (HTTP/2) or open another
/// (`EarlyRequests`). Every answer of the manifest says it again, so it is not aged.
package final class OriginRanges: Sendable {
    package struct Record: Codable, Sendable, Equatable {
        /// Nil: not found out yet (a record of the manifest's origin only).
        package var support: RangeSupport?
        /// The `Server` header of the answer it was found from.
        package var server: String?
        /// When, in seconds since 1970.
        package var checked: Double
        /// The protocol of the manifest's last answer from this origin, as ALPN names it (`h2`).
        package var http: String?
    }

    /// How long a record is believed.
    package static let maximumAge: Double = 7 * 86_400
    /// Records kept: the most recently checked.
    package static let maximumCount = 64

    private let path: String?
    private let records: Mutex<[String: Record]>
    /// The time records are aged and stamped with.
    private let clock: WallClock

    /// The records of `layout`'s root; a missing or unreadable file is no record. A `layout` of nil
    /// remembers nothing beyond this value (a dry run, which writes nothing).
    package init(layout: CacheLayout?, clock: WallClock = .system) {
        path = layout?.origins
        self.clock = clock
        let loaded = layout.flatMap { layout in
            try? JSONCoding.load([String: Record].self, from: layout.origins) { try StateValue.dictionary($0, StateValue.object) }
        }
        records = Mutex(loaded ?? [:])
    }

    /// `scheme://host:port` of `url`, lowercased, the port spelled out.
    package static func key(_ url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(host):\(port)"
    }

    /// The support remembered for `url`'s origin, if any, and not too old.
    package func support(for url: URL) -> RangeSupport? {
        let now = clock.now().timeIntervalSince1970
        guard let key = Self.key(url), let record = records.withLock({ $0[key] }) else { return nil }
        guard now - record.checked < Self.maximumAge, now >= record.checked else { return nil }
        return record.support
    }

    /// The protocol the manifest's last answer from `url`'s origin came over (`h2`), if remembered.
    package func http(for url: URL) -> String? {
        guard let key = Self.key(url) else { return nil }
        return records.withLock { $0[key]?.http }
    }

    /// Records the protocol an answer of the manifest at `url` came over; written only when it changes.
    package func remember(http: String?, for url: URL, server: String?) {
        let now = clock.now().timeIntervalSince1970
        guard let key = Self.key(url) else { return }
        let changed = records.withLock { records -> Bool in
            guard var record = records[key] else {
                guard http != nil else { return false }
                records[key] = Record(support: nil, server: server, checked: now, http: http)
                Self.trim(&records)
                return true
            }
            guard record.http != http else { return false }
            record.http = http
            records[key] = record
            return true
        }
        if changed { save() }
    }

    /// The record for `url`'s origin, as stored.
    package func record(for url: URL) -> Record? {
        guard let key = Self.key(url) else { return nil }
        return records.withLock { $0[key] }
    }

    /// Whether an answer from `server` is from another server than the one `url`'s record was found
    /// with: the record is dropped, and the origin found out again.
    package func forgetIfServerChanged(_ url: URL, server: String?) {
        guard let key = Self.key(url) else { return }
        let changed = records.withLock { records -> Bool in
            guard let record = records[key], record.server != server else { return false }
            records[key] = nil
            return true
        }
        if changed { save() }
    }

    /// Records what an answer showed of `url`'s origin; written at once when it changes the record.
    package func remember(_ support: RangeSupport, for url: URL, server: String?) {
        let now = clock.now().timeIntervalSince1970
        guard let key = Self.key(url) else { return }
        let changed = records.withLock { records -> Bool in
            let old = records[key]
            if let old, old.support == support, old.server == server, now - old.checked < Self.maximumAge / 2 {
                return false
            }
            records[key] = Record(support: support, server: server, checked: now, http: old?.http)
            Self.trim(&records)
            return true
        }
        if changed { save() }
    }

    /// Drops the least recently checked record past `maximumCount`.
    private static func trim(_ records: inout [String: Record]) {
        if records.count > maximumCount, let oldest = records.min(by: { $0.value.checked < $1.value.checked }) {
            records[oldest.key] = nil
        }
    }

    /// A lost record costs one finding-out again, so it is written without flushes; under the root's
    /// lock, one sync at a time writes it.
    private func save() {
        guard let path else { return }
        let bytes = records.withLock { JSONCoding.encode($0) }
        try? FileSystem.writeAtomically(bytes, to: path, mode: 0o600, durable: false)
    }
}
