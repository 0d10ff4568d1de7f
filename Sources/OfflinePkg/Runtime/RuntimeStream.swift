import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The body of an answer that will not be stored, passed from the upstream transfer to the client as
/// it arrives (docs/protocol.md#neighbours-on-the-device): at most `capacity` bytes wait in memory; past that the transfer's thread waits for the
/// client to read, so a slow client slows the upstream instead of filling the device.
///
/// An answer that was to be stored and turned out too large mid-way starts with what was already
/// received into its temporary file (`prefix`), read back before the rest.
///
/// The writer is the transfer's own thread; the reader a server thread (which must not block: it
/// passes `park`, which suspends its connection and returns how to resume it) or any thread that may
/// block (`readWaiting`).
package final class RuntimeStream: @unchecked Sendable {
    // @unchecked: every mutable field is touched under `condition`'s lock.
    /// Bytes held in memory before the writer waits.
    package static let capacity = 1 << 20

    package enum ReadResult: Equatable {
        case bytes(Int)
        /// Nothing yet: the reader was parked and will be resumed when there is.
        case parked
        case end
        case failed
    }

    private let condition = ThreadCondition()
    private var chunks: [Data] = []
    private var offset = 0
    private var buffered = 0
    private var finished = false
    private var failure: Error?
    private var cancelled = false
    private var resume: (@Sendable () -> Void)?
    private var prefix: (descriptor: Int32, length: Int64, read: Int64)?
    /// The length the upstream declared (`Content-Length`), when it did.
    package let length: Int64?

    package init(length: Int64?, prefix: (descriptor: Int32, length: Int64)? = nil) {
        self.length = length
        self.prefix = prefix.map { ($0.descriptor, $0.length, 0) }
    }

    deinit {
        if let prefix { close(prefix.descriptor) }
    }

    // MARK: The writer

    /// Adds a chunk, waiting while `capacity` bytes wait to be read; throws when the reader went away,
    /// or read nothing for `stallTimeout` seconds (a client that stopped reading holds no transfer).
    func write(_ chunk: UnsafeRawBufferPointer, stallTimeout: TimeInterval) throws {
        condition.lock()
        let deadline = Date().addingTimeInterval(stallTimeout)
        while !cancelled && buffered > 0 && buffered + chunk.count > Self.capacity {
            if !condition.wait(seconds: deadline.timeIntervalSinceNow), Date() >= deadline, buffered + chunk.count > Self.capacity {
                cancelled = true
            }
        }
        guard !cancelled else {
            condition.unlock()
            throw CancellationError()
        }
        chunks.append(Data(chunk))
        buffered += chunk.count
        let waiting = takeResume()
        condition.unlock()
        waiting?()
    }

    /// The transfer ended: cleanly (nil) or with `error` (the client then sees its connection end
    /// short of the length).
    func finish(_ error: Error?) {
        condition.lock()
        finished = true
        failure = error
        let waiting = takeResume()
        condition.unlock()
        waiting?()
    }

    // MARK: The reader

    /// Copies what is there into `buffer`. With nothing there yet, calls `park` (under the stream's
    /// lock, so no chunk can arrive between the look and the park) and keeps the resume it returns.
    package func read(into buffer: UnsafeMutableRawBufferPointer, park: () -> @Sendable () -> Void) -> ReadResult {
        condition.lock()
        defer { condition.unlock() }
        if let result = take(into: buffer) { return result }
        resume = park()
        return .parked
    }

    /// The same, waiting on this thread until there is something (a thread that may block).
    package func readWaiting(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let result = take(into: buffer) { return result }
            condition.wait()
        }
    }

    /// The reader is gone (its response freed, or nobody wants the answer): the writer stops at its
    /// next chunk and the transfer ends.
    package func cancel() {
        condition.lock()
        cancelled = true
        resume = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Every byte, waiting for the end (an in-process host's URL hook); at most `limit` bytes.
    package func collect(limit: Int) throws -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let result = buffer.withUnsafeMutableBytes { readWaiting(into: $0) }
            switch result {
            case .bytes(let count):
                data.append(contentsOf: buffer[..<count])
                if data.count > limit {
                    cancel()
                    throw OfflinePkgError.sizeMismatch(what: "an answer that is not stored", reason: "larger than \(limit) bytes")
                }
            case .end: return data
            case .failed, .parked:
                condition.lock()
                let error = failure
                condition.unlock()
                throw error ?? CancellationError()
            }
        }
    }

    /// Under the lock: what the reader gets now, or nil when it must wait.
    private func take(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult? {
        if cancelled { return .failed }
        if let current = prefix, current.read < current.length {
            let count = pread(
                current.descriptor, buffer.baseAddress, min(buffer.count, Int(current.length - current.read)), off_t(current.read)
            )
            guard count > 0 else { return .failed }
            prefix?.read += Int64(count)
            return .bytes(count)
        }
        if buffered > 0 {
            var copied = 0
            while copied < buffer.count, let first = chunks.first {
                let count = min(buffer.count - copied, first.count - offset)
                first.withUnsafeBytes { bytes in
                    (buffer.baseAddress! + copied).copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
                }
                copied += count
                offset += count
                if offset == first.count {
                    chunks.removeFirst()
                    offset = 0
                }
            }
            buffered -= copied
            condition.broadcast()
            return .bytes(copied)
        }
        if finished { return failure == nil ? .end : .failed }
        return nil
    }

    private func takeResume() -> (@Sendable () -> Void)? {
        defer { resume = nil }
        condition.broadcast()
        return resume
    }
}
