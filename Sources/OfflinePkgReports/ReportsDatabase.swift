import FoundationEssentials
import OfflinePkg
import Synchronization

/// The collector's store of install reports: one SQLite file in WAL mode with `synchronous=FULL`, so an
/// event acknowledged to a device is on disk (a `kill -9` or a power cut loses nothing acknowledged), and
/// readers (`reports show`) never block the writer.
///
/// An event is stored once however often it is sent: its natural key is the device, the event kind and
/// the device's time to the millisecond (a device records one event of a kind at a time: syncs take a
/// lock, launches are serial). A batch is one transaction: all of it is stored, or none.
///
///     events(id, device, time_ms, event, sequence, exit_status, error, duration_ms, shell_version,
///            offlinepkg, received_ms)               UNIQUE (device, event, time_ms)
///     event_packages(event_id, package, from_version, to_version, via, bytes)
///                                                   PRIMARY KEY (event_id, package)
package final class ReportsDatabase: Sendable {
    package let path: String
    /// The time events are stamped as received with.
    package let clock: WallClock
    private let connection: Mutex<SQLiteConnectionBox>

    /// The file's `application_id`: "opkr".
    static let applicationID: Int64 = 0x6F70_6B72
    static let schemaVersion: Int64 = 1

    /// Opens (creating it if need be) the database at `path`. `busyTimeout`: how long a write waits for
    /// another process's before it fails as locked.
    package init(path: String, readOnly: Bool = false, busyTimeout: TimeInterval = 2, clock: WallClock = .system) throws {
        self.path = path
        self.clock = clock
        if readOnly && !FileManager.default.fileExists(atPath: path) {
            throw DatabaseFailure(.cannotWrite, "no reports database at \(path)")
        }
        let connection = try SQLiteConnection(path: path, readOnly: readOnly, busyTimeout: busyTimeout)
        try Self.prepare(connection, readOnly: readOnly)
        self.connection = Mutex(SQLiteConnectionBox(connection))
    }

    private static func prepare(_ connection: SQLiteConnection, readOnly: Bool) throws {
        let application = try connection.integer("PRAGMA application_id") ?? 0
        let tables = try connection.integer("SELECT count(*) FROM sqlite_schema WHERE type = 'table'") ?? 0
        if application != applicationID && (application != 0 || tables > 0) {
            throw DatabaseFailure(
                .notADatabase, "\(connection.path) is an SQLite database of something else, not offlinepkg's reports")
        }
        let version = try connection.integer("PRAGMA user_version") ?? 0
        if version > schemaVersion {
            throw DatabaseFailure(
                .other,
                "\(connection.path) was written by a newer offlinepkg (schema \(version), this one reads \(schemaVersion))")
        }
        if readOnly {
            if tables == 0 { throw DatabaseFailure(.notADatabase, "\(connection.path) holds no reports yet") }
            return
        }
        // WAL: `reports show` reads while the collector writes. FULL: each commit is flushed before the
        // device hears it was stored.
        let mode = try connection.text("PRAGMA journal_mode=WAL")
        guard mode?.lowercased() == "wal" else {
            throw DatabaseFailure(
                .other, "database \(connection.path) cannot use a write-ahead log here (journal mode \(mode ?? "?"))")
        }
        try connection.execute("PRAGMA synchronous=FULL")
        guard version < schemaVersion else { return }
        try connection.execute(
            """
            BEGIN IMMEDIATE;
            CREATE TABLE IF NOT EXISTS events (
                id INTEGER PRIMARY KEY,
                device TEXT NOT NULL,
                time_ms INTEGER NOT NULL,
                event TEXT NOT NULL,
                sequence INTEGER,
                exit_status INTEGER,
                error TEXT,
                duration_ms INTEGER,
                shell_version TEXT,
                offlinepkg TEXT NOT NULL,
                received_ms INTEGER NOT NULL,
                UNIQUE (device, event, time_ms)
            );
            CREATE TABLE IF NOT EXISTS event_packages (
                event_id INTEGER NOT NULL REFERENCES events(id),
                package TEXT NOT NULL,
                from_version TEXT,
                to_version TEXT,
                via TEXT,
                bytes INTEGER NOT NULL,
                PRIMARY KEY (event_id, package)
            ) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS events_by_time ON events(time_ms);
            PRAGMA application_id = \(applicationID);
            PRAGMA user_version = \(schemaVersion);
            COMMIT;
            """)
    }

    /// What storing a batch did.
    package struct Stored: Sendable, Equatable, Codable {
        /// Events new to the database.
        package var stored: Int
        /// Events it had already (sent again after an answer that did not arrive).
        package var duplicates: Int
    }

    /// Stores `events` in one transaction; those already there are counted, not stored again.
    package func store(_ events: [ReportEvent], receivedAt: Date? = nil) throws -> Stored {
        let receivedAt = receivedAt ?? clock.now()
        return try connection.withLock { box in
            let connection = box.connection
            try connection.execute("BEGIN IMMEDIATE")
            do {
                let result = try insert(events, receivedAt: receivedAt, box)
                try connection.execute("COMMIT")
                return result
            } catch {
                try? connection.execute("ROLLBACK")
                throw error
            }
        }
    }

    private func insert(_ events: [ReportEvent], receivedAt: Date, _ box: SQLiteConnectionBox) throws -> Stored {
        let connection = box.connection
        let insertEvent = try box.statement(
            """
            INSERT INTO events (device, time_ms, event, sequence, exit_status, error, duration_ms, shell_version, offlinepkg, received_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (device, event, time_ms) DO NOTHING
            """)
        let insertPackage = try box.statement(
            "INSERT INTO event_packages (event_id, package, from_version, to_version, via, bytes) VALUES (?, ?, ?, ?, ?, ?)")
        var result = Stored(stored: 0, duplicates: 0)
        let received = Int64(receivedAt.timeIntervalSince1970 * 1000)
        for event in events {
            insertEvent.reset()
            try insertEvent.bind(1, event.device)
            try insertEvent.bind(2, Self.milliseconds(event.time))
            try insertEvent.bind(3, event.event.rawValue)
            try insertEvent.bind(4, event.sequence.map(Int64.init))
            try insertEvent.bind(5, event.exitStatus.map(Int64.init))
            try insertEvent.bind(6, event.error)
            try insertEvent.bind(7, event.durationMs.map(Int64.init))
            try insertEvent.bind(8, event.shellVersion)
            try insertEvent.bind(9, event.offlinepkg)
            try insertEvent.bind(10, received)
            _ = try insertEvent.step()
            guard connection.changes == 1 else {
                result.duplicates += 1
                continue
            }
            result.stored += 1
            let id = connection.lastInsertedRow
            for package in event.packages {
                insertPackage.reset()
                try insertPackage.bind(1, id)
                try insertPackage.bind(2, package.id)
                try insertPackage.bind(3, package.from)
                try insertPackage.bind(4, package.to)
                try insertPackage.bind(5, package.via)
                try insertPackage.bind(6, package.bytes)
                _ = try insertPackage.step()
            }
        }
        return result
    }

    /// The event's time as stored: milliseconds since 1970, as the device wrote them.
    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// Events and devices stored (the collector's `GET /`).
    package func counts() throws -> (events: Int, devices: Int) {
        try connection.withLock { box in
            let statement = try box.statement("SELECT count(*), count(DISTINCT device) FROM events")
            statement.reset()
            // Reset after reading: a statement left on a row holds its read transaction open.
            defer { statement.reset() }
            guard try statement.step() else { return (0, 0) }
            return (Int(statement.integer(0)), Int(statement.integer(1)))
        }
    }

    /// One stored event's package row, in the order events happened (device time, then arrival); an
    /// event that lists no package (a sync that failed before it had a plan) is one row without one.
    package struct Row: Sendable {
        package var device: String
        package var timeMs: Int64
        package var event: ReportEvent.Kind
        package var error: String?
        /// The event's id in the database: rows of one event are next to each other.
        package var eventID: Int64
        package var package: String?
        package var from: String?
        package var to: String?
        package var via: String?
        package var bytes: Int64
    }

    /// Every package row of every event, oldest first; `body` sees them one by one.
    package func eachRow(_ body: (Row) throws -> Void) throws {
        try connection.withLock { box in
            let statement = try box.statement(
                """
                SELECT e.device, e.time_ms, e.event, e.error, p.package, p.from_version, p.to_version, p.via, p.bytes, e.id
                FROM events e LEFT JOIN event_packages p ON p.event_id = e.id ORDER BY e.time_ms, e.id
                """)
            statement.reset()
            defer { statement.reset() }
            while try statement.step() {
                guard let kind = ReportEvent.Kind(rawValue: statement.text(2) ?? "") else { continue }
                try body(
                    Row(
                        device: statement.text(0) ?? "", timeMs: statement.integer(1), event: kind, error: statement.text(3),
                        eventID: statement.integer(9), package: statement.text(4), from: statement.text(5), to: statement.text(6),
                        via: statement.text(7),
                        bytes: statement.integer(8)))
            }
        }
    }

    /// `PRAGMA integrity_check`'s answer: "ok" for an intact file.
    package func integrityCheck() throws -> String {
        try connection.withLock { box in try box.connection.text("PRAGMA integrity_check") ?? "" }
    }

    /// Folds the write-ahead log into the database file (a clean stop).
    package func checkpoint() {
        connection.withLock { box in _ = try? box.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
    }
}

/// The connection and its prepared statements, owned by `ReportsDatabase` under its lock.
final class SQLiteConnectionBox: @unchecked Sendable {
    // @unchecked: only touched under `ReportsDatabase.connection`'s lock.
    let connection: SQLiteConnection
    private var statements = [String: SQLiteStatement]()

    init(_ connection: SQLiteConnection) { self.connection = connection }

    func statement(_ sql: String) throws -> SQLiteStatement {
        if let statement = statements[sql] { return statement }
        let statement = try connection.prepare(sql)
        statements[sql] = statement
        return statement
    }
}
