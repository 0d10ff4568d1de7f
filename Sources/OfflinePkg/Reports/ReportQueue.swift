import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The install reports a root keeps until they are sent (docs/protocol.md#install-reports): `reports/queue.jsonl`, one event a
/// line, and `reports/state.json`, where they go.
///
/// Every process that records an event — the `sync` command, a host's `Updater` and its launch records,
/// `rollback` — changes the two under one `flock` (`reports/lock`), so writers in several processes
/// never interleave: an event is one `write` of a whole line with `O_APPEND`, flushed before the lock is
/// let go. A reader without the lock (`status`) sees whole lines and at most one line being written,
/// which it leaves out. A line torn by a power cut is dropped by the next writer, which rewrites the
/// file without it. Bounded: past `maximumEvents` or `maximumBytes` the oldest events go first.
package struct ReportQueue: Sendable {
    package let layout: CacheLayout

    /// Events kept at most, and bytes of queue at most; the oldest go first (docs/protocol.md#install-reports).
    package static let maximumEvents = 200
    package static let maximumBytes = 256 << 10

    package init(layout: CacheLayout) { self.layout = layout }

    /// Where the reports go and what the last send did.
    package struct State: Codable, Sendable, Equatable {
        /// The signed manifest's `reports.url` as the last sync accepted it.
        package var url: String
        /// The shell version the last sync was given, for the events recorded between syncs (launches).
        package var shellVersion: String?
        package var lastSent: Date?
        package var lastFailure: SyncFailure?

        package init(url: String, shellVersion: String?) {
            self.url = url
            self.shellVersion = shellVersion
        }
    }

    // MARK: Reading, without the lock

    /// The state, or nil when reports are off for this root (no manifest named a URL, or the device
    /// turned them off).
    package func loadState() -> State? {
        (try? JSONCoding.load(State.self, from: layout.reportState)) ?? nil
    }

    /// The queued events, oldest first, each a line of JSON without its newline; lines that are not
    /// whole (being written, or torn) are left out.
    package func queued() -> [[UInt8]] {
        guard let bytes = try? FileSystem.read(layout.reportQueue, limit: Self.maximumBytes * 4) else { return [] }
        return Self.lines(bytes).whole
    }

    // MARK: Changing, under the lock

    /// Runs `body` holding the reports lock (made with the folder when missing).
    private func locked<T>(_ body: () throws -> T) throws -> T {
        try FileSystem.makeDirectories(layout.reports, mode: 0o700)
        guard let lock = try FileLock(path: layout.reportLock, wait: true) else {
            throw OfflinePkgError.locked(root: layout.reports)
        }
        return try withExtendedLifetime(lock) { try body() }
    }

    /// Records `event` when reports are on for this root: the state names a URL. The event is made by
    /// `make` from the root's device id and the state, only then. Never throws: a report that cannot be
    /// written (a full disk) must not fail what it reports on.
    package func record(_ make: (_ device: String, _ state: State) -> ReportEvent?) {
        guard FileSystem.isDirectory(layout.reports) else { return }
        try? locked {
            guard let state = loadState(), let device = try? DeviceID.of(layout), let event = make(device, state) else { return }
            try append(event.json)
        }
    }

    /// Appends one line under the lock: in place with `O_APPEND` while the bounds hold and the file ends
    /// in a whole line; else the file is rewritten with the newest lines that fit beside the new one.
    private func append(_ line: [UInt8]) throws {
        let size = FileSystem.fileSize(layout.reportQueue) ?? 0
        guard line.count + 1 <= Self.maximumBytes else { return }
        let existing = size > 0 ? try FileSystem.read(layout.reportQueue, limit: Int(size) + (64 << 10)) : []
        let (whole, torn) = Self.lines(existing)
        if !torn && whole.count < Self.maximumEvents && Int(size) + line.count + 1 <= Self.maximumBytes {
            let fd = try FileDescriptor.open(layout.reportQueue, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, mode: 0o600)
            try fd.closeAfter { fd throws in
                try fd.writeAll(line + [0x0a], path: layout.reportQueue)
                try fd.sync(path: layout.reportQueue)
            }
            if size == 0 { try FileSystem.syncDirectory(layout.reports) }
            return
        }
        var kept = [[UInt8]]()
        var bytes = line.count + 1
        for old in whole.reversed() {
            guard kept.count + 1 < Self.maximumEvents, bytes + old.count + 1 <= Self.maximumBytes else { break }
            kept.append(old)
            bytes += old.count + 1
        }
        try write(kept.reversed() + [line])
    }

    /// Takes the sent events out of the queue (compared byte for byte: events recorded meanwhile, by
    /// this process or another, stay) and notes the send at `time` (nil: they were dropped, not sent).
    package func sent(_ events: [[UInt8]], at time: Date?) {
        let sent = Set(events)
        try? locked {
            let left = queued().filter { !sent.contains($0) }
            try write(left)
            if let time, var state = loadState() {
                state.lastSent = time
                state.lastFailure = nil
                try FileSystem.writeAtomically(JSONCoding.encode(state), to: layout.reportState, mode: 0o600, durable: false)
            }
        }
    }

    /// Notes a send that failed; the events stay for the next sync.
    package func notSent(_ failure: SyncFailure) {
        try? locked {
            guard var state = loadState() else { return }
            state.lastFailure = failure
            try FileSystem.writeAtomically(JSONCoding.encode(state), to: layout.reportState, mode: 0o600, durable: false)
        }
    }

    /// Sets where reports go (after a sync accepted a manifest): the URL and the shell version. Nil turns
    /// reports off for this root, and the queue goes with it: nothing is kept that cannot be sent.
    package func target(url: String?, shellVersion: String?) {
        guard let url else { return forget() }
        if let state = loadState(), state.url == url, state.shellVersion == shellVersion { return }
        try? locked {
            var state = loadState() ?? State(url: url, shellVersion: shellVersion)
            if state.url != url { state.lastFailure = nil }
            (state.url, state.shellVersion) = (url, shellVersion)
            try FileSystem.writeAtomically(JSONCoding.encode(state), to: layout.reportState, mode: 0o600)
        }
    }

    /// Reports off (the device turned them off, or the manifest names no URL): the queue and the state
    /// go. A root that never had reports is not touched.
    package func forget() {
        guard FileSystem.isDirectory(layout.reports),
            FileSystem.exists(layout.reportState) || FileSystem.exists(layout.reportQueue)
        else { return }
        try? locked {
            FileSystem.discardFile(layout.reportQueue)
            FileSystem.discardFile(layout.reportState)
        }
    }

    /// Replaces the queue with `lines` (atomically, flushed), or removes it when there are none.
    private func write(_ lines: [[UInt8]]) throws {
        guard !lines.isEmpty else {
            FileSystem.discardFile(layout.reportQueue)
            return
        }
        var bytes = [UInt8]()
        for line in lines { bytes += line + [0x0a] }
        try FileSystem.writeAtomically(bytes, to: layout.reportQueue, mode: 0o600)
    }

    /// The whole lines of `bytes` (each without its newline), and whether it ends in a line that is not
    /// whole: one without its newline, which a writer was killed in. An empty line is skipped.
    static func lines(_ bytes: [UInt8]) -> (whole: [[UInt8]], torn: Bool) {
        var whole = [[UInt8]]()
        var start = 0
        for index in bytes.indices where bytes[index] == 0x0a {
            if index > start { whole.append(Array(bytes[start..<index])) }
            start = index + 1
        }
        return (whole, start < bytes.count)
    }
}

extension ReportQueue {
    /// What `status` shows of the queue.
    package var status: ReportsStatus? {
        let waiting = queued()
        guard let state = loadState() else {
            return waiting.isEmpty ? nil : ReportsStatus(url: nil, events: waiting.count, bytes: Self.size(waiting))
        }
        var status = ReportsStatus(url: state.url, events: waiting.count, bytes: Self.size(waiting))
        status.lastSent = state.lastSent
        status.lastFailure = state.lastFailure
        return status
    }

    static func size(_ lines: [[UInt8]]) -> Int { lines.reduce(0) { $0 + $1.count + 1 } }
}

/// The install reports of a root as `status --json` shows them (docs/protocol.md#install-reports).
public struct ReportsStatus: Sendable, Codable, Equatable {
    /// Where they are sent: the signed manifest's `reports.url`; nil when reports are off.
    public var url: String?
    /// Events waiting to be sent, and their bytes on disk.
    public var events: Int
    public var bytes: Int
    /// The last send that the collector took, and the last that failed since.
    public var lastSent: Date? = nil
    public var lastFailure: SyncFailure? = nil
}
