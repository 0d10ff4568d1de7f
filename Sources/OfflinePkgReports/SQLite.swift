internal import CSQLite
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// A thin wrapper over one SQLite connection, in swift-system's style: every call's result goes through
/// `check`, which turns a failure into a `DatabaseFailure` that says what it means for the reports
/// database (locked by another process, disk full, not a database). Not thread-safe: its owner
/// serialises the calls (`ReportsDatabase`).
final class SQLiteConnection {
    let path: String
    private var handle: OpaquePointer?

    /// Opens `path` (created 0600 when missing and `readOnly` is false). `busyTimeout`: how long a write
    /// waits for another writer before it fails as locked.
    init(path: String, readOnly: Bool, busyTimeout: TimeInterval) throws {
        self.path = path
        if !readOnly && !FileManager.default.fileExists(atPath: path) {
            // SQLite gives its -wal and -shm files the database's mode: created 0600 here, so are they.
            let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            if fd < 0 {
                throw DatabaseFailure(.cannotWrite, "database \(path) cannot be created: \(String(cString: strerror(errno)))")
            }
            Glibc.close(fd)
        }
        var handle: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        self.handle = handle
        if code != SQLITE_OK {
            let error = failure(code, "open")
            sqlite3_close_v2(handle)
            self.handle = nil
            throw error
        }
        sqlite3_busy_timeout(handle, Int32(busyTimeout * 1000))
    }

    deinit { close() }

    func close() {
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    /// Runs SQL that returns no rows (several statements may follow each other).
    func execute(_ sql: String) throws {
        try check(sqlite3_exec(handle, sql, nil, nil, nil), sql)
    }

    func prepare(_ sql: String) throws -> SQLiteStatement {
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v2(handle, sql, -1, &statement, nil), sql)
        return SQLiteStatement(connection: self, pointer: statement!, sql: sql)
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { Int(sqlite3_changes(handle)) }
    var lastInsertedRow: Int64 { sqlite3_last_insert_rowid(handle) }

    /// One integer from a query such as `PRAGMA user_version`.
    func integer(_ sql: String) throws -> Int64? {
        let statement = try prepare(sql)
        return try statement.step() ? statement.integer(0) : nil
    }

    /// `PRAGMA journal_mode=WAL` answers the mode it got: a database on a file system without shared
    /// memory stays in another mode, which must not pass unnoticed.
    func text(_ sql: String) throws -> String? {
        let statement = try prepare(sql)
        return try statement.step() ? statement.text(0) : nil
    }

    @discardableResult
    func check(_ code: Int32, _ what: String) throws -> Int32 {
        guard code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE else { throw failure(code, what) }
        return code
    }

    /// What a failed call means, in the database's words: locked, full, read-only, not a database.
    func failure(_ code: Int32, _ what: String) -> DatabaseFailure {
        let detail = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
        switch code & 0xff {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return DatabaseFailure(
                .locked, "database \(path) is locked by another process (\(detail)): is another collector or import writing it?")
        case SQLITE_FULL:
            return DatabaseFailure(.full, "database \(path): the disk is full (\(detail)); nothing was stored")
        case SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH:
            return DatabaseFailure(.cannotWrite, "database \(path) cannot be written: \(detail)")
        case SQLITE_CANTOPEN:
            return DatabaseFailure(.cannotWrite, "database \(path) cannot be opened: \(detail)")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return DatabaseFailure(.notADatabase, "\(path) is not an intact SQLite database (\(detail))")
        case SQLITE_IOERR:
            return DatabaseFailure(.io, "database \(path): i/o error (\(detail))")
        default:
            return DatabaseFailure(.other, "database \(path): \(detail) (sqlite result \(code) in \(what.prefix(60)))")
        }
    }

}

/// A reports database that cannot do what was asked, said for the publisher: which file, and why.
package struct DatabaseFailure: Error, CustomStringConvertible, Sendable {
    package enum Kind: Sendable {
        /// Another process holds a write lock past the busy timeout.
        case locked
        /// No space left for the write.
        case full
        case io
        /// Permissions, a read-only file system, a folder that does not exist.
        case cannotWrite
        /// The file is not an SQLite database, is damaged, or belongs to something else.
        case notADatabase
        case other
    }

    package let kind: Kind
    package let description: String

    init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }

    /// A client may send the same request later and succeed: the lock goes, space is freed.
    package var isTemporary: Bool { kind == .locked || kind == .full || kind == .io }
}

/// One prepared statement; bind by index from 1, columns from 0.
final class SQLiteStatement {
    private let connection: SQLiteConnection
    private let pointer: OpaquePointer
    private let sql: String

    fileprivate init(connection: SQLiteConnection, pointer: OpaquePointer, sql: String) {
        self.connection = connection
        self.pointer = pointer
        self.sql = sql
    }

    deinit { sqlite3_finalize(pointer) }

    func reset() {
        sqlite3_reset(pointer)
        sqlite3_clear_bindings(pointer)
    }

    func bind(_ index: Int32, _ value: String?) throws {
        guard let value else {
            _ = try connection.check(sqlite3_bind_null(pointer, index), sql)
            return
        }
        try connection.check(sqlite3_bind_text(pointer, index, value, -1, csqlite_transient()), sql)
    }

    func bind(_ index: Int32, _ value: Int64?) throws {
        guard let value else {
            _ = try connection.check(sqlite3_bind_null(pointer, index), sql)
            return
        }
        try connection.check(sqlite3_bind_int64(pointer, index, value), sql)
    }

    /// Steps once: true when a row is ready, false when done.
    func step() throws -> Bool {
        try connection.check(sqlite3_step(pointer), sql) == SQLITE_ROW
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(pointer, column) == SQLITE_NULL }
    func integer(_ column: Int32) -> Int64 { sqlite3_column_int64(pointer, column) }

    func text(_ column: Int32) -> String? {
        guard let text = sqlite3_column_text(pointer, column) else { return nil }
        return String(cString: text)
    }
}
