import FoundationEssentials
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// `offlinepkg reports import` (docs/protocol.md#install-reports): install reports that a log pipeline collected, as JSON lines —
/// each line one event object, or one array of them (a POST body as logged). Stored as the collector
/// stores them: once each, however many times a line repeats across files and runs.
package enum ReportsImport {
    /// What an import did.
    package struct Result: Sendable, Codable, Equatable {
        package var files = 0
        package var lines = 0
        package var events = 0
        package var stored = 0
        package var duplicates = 0
        /// Lines refused, and the first `maximumProblems` of them as `FILE:LINE: what is wrong`.
        package var refused = 0
        package var problems: [String] = []
    }

    static let maximumProblems = 20
    /// A line longer than a POST body may be is refused unread.
    static let maximumLineBytes = ReportsCollector.maximumBodyBytes
    /// Events stored per transaction.
    static let batchSize = 2000

    /// Reads `paths` (`-` for standard input) into `database`. A line that breaks a rule is counted and
    /// named, the others are stored; an unreadable file or a database failure throws.
    package static func run(_ paths: [String], into database: ReportsDatabase) throws -> Result {
        var result = Result()
        var batch = [ReportEvent]()
        func flush() throws {
            guard !batch.isEmpty else { return }
            let stored = try database.store(batch)
            result.stored += stored.stored
            result.duplicates += stored.duplicates
            batch.removeAll(keepingCapacity: true)
        }
        for path in paths {
            result.files += 1
            let name = path == "-" ? "(stdin)" : path
            try eachLine(of: path) { number, line in
                result.lines += 1
                do {
                    guard line.count <= maximumLineBytes else {
                        throw EventReader.Problem(path: "", reason: "line longer than \(maximumLineBytes) bytes")
                    }
                    let events = try EventReader.events(line)
                    result.events += events.count
                    batch += events
                } catch {
                    result.refused += 1
                    if result.problems.count < maximumProblems {
                        result.problems.append("\(name):\(number): \(error)")
                    }
                }
                if batch.count >= batchSize { try flush() }
            }
        }
        try flush()
        return result
    }

    /// Calls `body` with each non-empty line of the file (numbered from 1), read in blocks, without its
    /// newline (or `\r\n`).
    static func eachLine(of path: String, _ body: (Int, [UInt8]) throws -> Void) throws {
        let file: FileDescriptor
        if path == "-" {
            file = FileDescriptor(rawValue: 0)
        } else {
            guard let opened = try? FileDescriptor.open(path, O_RDONLY) else {
                throw OfflinePkgError.unavailable("cannot read \(path): no such file, or not readable")
            }
            file = opened
        }
        defer { if path != "-" { file.close() } }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var pending = [UInt8]()
        var number = 0
        var skipping = false
        func emit(_ line: ArraySlice<UInt8>) throws {
            number += 1
            var line = line
            if line.last == 0x0d { line = line.dropLast() }
            if !line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { try body(number, Array(line)) }
        }
        while true {
            let count = block.withUnsafeMutableBytes { Glibc.read(file.rawValue, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw OfflinePkgError.unavailable("cannot read \(path): \(Errno.current)")
            }
            if count == 0 { break }
            pending += block[0..<count]
            var start = 0
            while let newline = pending[start...].firstIndex(of: 0x0a) {
                if skipping {
                    skipping = false
                    number += 1
                } else {
                    try emit(pending[start..<newline])
                }
                start = newline + 1
            }
            pending.removeFirst(start)
            if pending.count > maximumLineBytes && !skipping {
                // A line past the limit: refused once, the rest of it skipped to its newline.
                try body(number + 1, pending)
                pending.removeAll()
                skipping = true
            } else if skipping {
                pending.removeAll()
            }
        }
        if !pending.isEmpty && !skipping { try emit(pending[...]) }
    }
}
