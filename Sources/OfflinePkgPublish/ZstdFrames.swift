internal import CZstd
import FoundationEssentials
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// Compresses byte strings into independent zstd frames with libzstd, on threads of their own: the
/// frames of a chunked archive (docs/protocol.md#chunked-archives-and-file-indexes) depend on nothing but their own input, so each is one
/// `ZSTD_compress2` call with fixed parameters, and the same input gives the same bytes whichever
/// worker made it. The caller appends inputs one by one, in archive order, and gets the frames back in
/// that order while it goes on reading the next files: reading and hashing overlap the compression.
///
/// Inputs are written in place into batch buffers of `batchBytes` (a frame that does not fit starts the
/// next; a bigger frame gets a buffer of its own), and a worker takes a whole batch: one queue entry,
/// one wake-up and one output array per ~20 small files, not per file, and the buffers go back to a
/// pool instead of a `malloc` and a cross-thread `free` per frame. How inputs are batched changes no
/// byte of any frame.
///
/// One compression context per worker, kept for the whole archive (a context costs ~1 MB at level 3).
/// At most `inFlightLimit` input bytes wait or compress at a time (and the batch being filled);
/// `append` waits past that, so a publish's memory stays a few tens of MiB whatever the site.
package final class ZstdFrames {
    /// Frames finished, in order: their bytes back to back, and each frame's length.
    package struct Batch {
        package let bytes: [UInt8]
        package let lengths: [Int]
    }

    /// Input bytes per batch buffer (a bigger frame gets a buffer its size).
    static let batchBytes = 256 << 10

    private let shared: Shared
    let level: Int
    /// The batch being filled: frames back to back from the buffer's start, not yet queued.
    private var filling: Buffer?
    private var fillingLengths = [Int]()
    private var fillingUsed = 0

    /// `workers` threads (at least one) at compression `level`, each frame with its content size and a
    /// checksum (4 bytes a frame: a damaged range fails in the decoder, before any hash is computed).
    package convenience init(level: Int, workers: Int, inFlightLimit: Int = 32 << 20) throws {
        try self.init(level: level, tuning: [], workers: workers, inFlightLimit: inFlightLimit)
    }

    private init(level: Int, tuning: [(ZSTD_cParameter, Int32)], workers: Int, inFlightLimit: Int) throws {
        self.level = level
        let contexts = try (0..<max(1, workers)).map { _ in try Context(level: level, tuning: tuning) }
        shared = Shared(inFlightLimit: inFlightLimit, workers: contexts.count)
        for context in contexts {
            let shared = shared
            guard OSThread.start(name: "zstd frames", { shared.work(with: context) }) else {
                // A queue short of a worker would wait for it for ever.
                shared.close()
                throw OfflinePkgError.io(path: "zstd frames", operation: "pthread_create", Errno(EAGAIN))
            }
        }
    }

    /// Stops the workers of an archive that was never finished (an error on the way).
    deinit { shared.close() }

    /// Appends the next frame: `fill` writes its `length` bytes at the start of the buffer it is given
    /// (`length` + 1 bytes: the last one is scratch, overwritten by what comes next), or throws, and
    /// then the frame is not added. Returns the batches finished since the last call, in order; waits
    /// first while more than the in-flight limit is queued.
    package func append(length: Int, _ fill: (UnsafeMutableRawBufferPointer) throws -> Void) throws -> [Batch] {
        var finished = [Batch]()
        if let buffer = filling, fillingUsed + length + 1 > buffer.capacity {
            finished = try queueFilling()
        }
        let buffer = filling ?? shared.buffer(capacity: max(Self.batchBytes, length + 1))
        filling = buffer
        try fill(UnsafeMutableRawBufferPointer(start: buffer.start + fillingUsed, count: length + 1))
        fillingLengths.append(length)
        fillingUsed += length
        return finished
    }

    /// `append` of bytes already in an array.
    package func submit(_ input: [UInt8]) throws -> [Batch] {
        try append(length: input.count) { buffer in
            input.withUnsafeBytes { buffer.copyMemory(from: $0) }
        }
    }

    /// Queues the batch being filled and waits for every queued frame; returns the batches not yet
    /// returned, in order.
    package func finish() throws -> [Batch] {
        let finished = filling == nil ? [] : try queueFilling()
        return try finished + shared.finish()
    }

    private func queueFilling() throws -> [Batch] {
        guard let buffer = filling else { return [] }
        let job = Job(buffer: buffer, lengths: fillingLengths, size: fillingUsed)
        filling = nil
        fillingLengths = []
        fillingUsed = 0
        return try shared.submit(job)
    }

    /// JSON bytes of the file index per frame. Fixed, so the index's bytes do not depend on the cores.
    static let fileIndexPiece = 256 << 10

    /// The file index (docs/protocol.md#chunked-archives-and-file-indexes), compressed: fetched by every device that updates by files, so small,
    /// but written at the end of every publish, after the last range is known, so not slow either.
    /// Frames of `fileIndexPiece` bytes of JSON compressed side by side (a device decompresses the
    /// concatenation as one stream) with zstd's optimal parser (btopt, 10 % smaller than levels 9-15's
    /// on this JSON of hex hashes), made cheap: matches of 5 bytes and more (a 3- or 4-byte match in hex
    /// is noise the parser weighs at every byte), 4 candidates, 128k/256k-entry tables: the size of
    /// level 16's btultra for a third of its CPU.
    package static func fileIndex(_ json: [UInt8], workers: Int = ProcessInfo.processInfo.activeProcessorCount) throws -> [UInt8] {
        let pieces = stride(from: 0, to: max(json.count, 1), by: fileIndexPiece).map { Array(json[$0..<min($0 + fileIndexPiece, json.count)]) }
        let tuning: [(ZSTD_cParameter, Int32)] = [
            (ZSTD_c_strategy, Int32(ZSTD_btopt.rawValue)), (ZSTD_c_minMatch, 5), (ZSTD_c_targetLength, 128), (ZSTD_c_searchLog, 2),
            (ZSTD_c_chainLog, 17), (ZSTD_c_hashLog, 18),
        ]
        let frames = try ZstdFrames(level: 16, tuning: tuning, workers: min(workers, pieces.count), inFlightLimit: Int.max)
        var compressed = [UInt8]()
        // A piece fills a batch buffer: each goes to a worker of its own.
        for piece in pieces { try frames.submit(piece).forEach { compressed += $0.bytes } }
        try frames.finish().forEach { compressed += $0.bytes }
        return compressed
    }

    /// Input memory, allocated once and reused through `Shared`'s pool (uninitialised: every byte a
    /// worker reads was written by `append`'s caller first).
    final class Buffer: @unchecked Sendable {
        let start: UnsafeMutableRawPointer
        let capacity: Int

        init(capacity: Int) {
            self.capacity = capacity
            start = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 64)
        }

        deinit { start.deallocate() }
    }

    /// A queued batch: `lengths` frames back to back from the start of `buffer`, `size` bytes in all.
    struct Job {
        let buffer: Buffer
        let lengths: [Int]
        let size: Int
    }

    /// A zstd compression context with the archive's parameters.
    final class Context: @unchecked Sendable {
        private let context: OpaquePointer

        /// `tuning`: parameters set after the level's (which they override).
        init(level: Int, tuning: [(ZSTD_cParameter, Int32)]) throws {
            guard let context = ZSTD_createCCtx() else { throw ZstdFrames.failure("ZSTD_createCCtx", 0) }
            self.context = context
            let parameters = [(ZSTD_c_compressionLevel, Int32(level)), (ZSTD_c_checksumFlag, 1), (ZSTD_c_contentSizeFlag, 1)] + tuning
            for (parameter, value) in parameters {
                let status = ZSTD_CCtx_setParameter(context, parameter, value)
                if ZSTD_isError(status) != 0 { throw ZstdFrames.failure("ZSTD_CCtx_setParameter", status) }
            }
        }

        deinit { ZSTD_freeCCtx(context) }

        /// One frame per input of the job, each compressed straight after the last into one array.
        func compress(_ job: Job) throws -> Batch {
            let bound = job.lengths.reduce(0) { $0 + ZSTD_compressBound($1) }
            var lengths = [Int]()
            lengths.reserveCapacity(job.lengths.count)
            // Uninitialised: zstd writes the bytes it returns, and zero-filling the bound costs a memset.
            let bytes = try [UInt8](unsafeUninitializedCapacity: bound) { out, count in
                var input = 0
                count = 0
                for length in job.lengths {
                    let status = ZSTD_compress2(context, out.baseAddress! + count, bound - count, job.buffer.start + input, length)
                    guard ZSTD_isError(status) == 0 else { throw ZstdFrames.failure("ZSTD_compress2", status) }
                    lengths.append(status)
                    count += status
                    input += length
                }
            }
            return Batch(bytes: bytes, lengths: lengths)
        }
    }

    /// The queue between the appending thread and the workers, guarded by `condition`.
    private final class Shared: @unchecked Sendable {
        private let condition = ThreadCondition()
        private let inFlightLimit: Int
        /// Batches not yet taken by a worker, from `pending[head]` on; `taken` is the next one's number.
        private var pending = [Job?]()
        private var head = 0
        private var taken = 0
        private var submitted = 0
        /// Finished batches by number, with their input's size, until they are returned in order.
        private var done = [Int: (batch: Batch, inputSize: Int)]()
        private var returned = 0
        private var inFlightBytes = 0
        /// Batch buffers of `batchBytes` that workers are done with, for the next batches.
        private var pool = [Buffer]()
        private var running: Int
        /// Workers waiting for a batch, and whether the appending thread waits for one to finish: a
        /// wake-up is sent only to someone waiting.
        private var idleWorkers = 0
        private var submitterWaits = false
        private var closed = false
        private var failure: OfflinePkgError?

        init(inFlightLimit: Int, workers: Int) {
            self.inFlightLimit = inFlightLimit
            running = workers
        }

        /// A buffer of at least `capacity` bytes: a pooled one if it is the standard size.
        func buffer(capacity: Int) -> Buffer {
            if capacity <= ZstdFrames.batchBytes {
                condition.lock()
                let pooled = pool.popLast()
                condition.unlock()
                if let pooled { return pooled }
            }
            return Buffer(capacity: capacity)
        }

        func submit(_ job: Job) throws -> [Batch] {
            condition.lock()
            defer { condition.unlock() }
            if let failure { throw failure }
            pending.append(job)
            submitted += 1
            inFlightBytes += job.size
            if idleWorkers > 0 { condition.signal() }
            var batches = takeFinished()
            while inFlightBytes > inFlightLimit && failure == nil {
                waitForBatch()
                batches += takeFinished()
            }
            if let failure { throw failure }
            return batches
        }

        func finish() throws -> [Batch] {
            condition.lock()
            defer { condition.unlock() }
            closed = true
            condition.broadcast()
            var batches = takeFinished()
            while returned < submitted && failure == nil {
                waitForBatch()
                batches += takeFinished()
            }
            if let failure { throw failure }
            return batches
        }

        func close() {
            condition.lock()
            closed = true
            pending.removeAll()
            head = 0
            taken = submitted
            condition.broadcast()
            condition.unlock()
        }

        /// Waits (with the lock held) until a worker files the next batch in order, or fails.
        private func waitForBatch() {
            submitterWaits = true
            condition.wait()
            submitterWaits = false
        }

        /// The batches ready to go out in order (called with the lock held).
        private func takeFinished() -> [Batch] {
            var batches = [Batch]()
            while let next = done.removeValue(forKey: returned) {
                batches.append(next.batch)
                inFlightBytes -= next.inputSize
                returned += 1
            }
            return batches
        }

        /// A worker's loop: take the oldest batch, compress it unlocked, file its frames under its
        /// number and give its buffer back to the pool.
        func work(with context: Context) {
            condition.lock()
            defer {
                running -= 1
                condition.broadcast()
                condition.unlock()
            }
            while failure == nil {
                guard taken < submitted, let job = pending[head] else {
                    if closed { return }
                    idleWorkers += 1
                    condition.wait()
                    idleWorkers -= 1
                    continue
                }
                let number = taken
                pending[head] = nil
                head += 1
                taken += 1
                if head >= 1024 && head * 2 >= pending.count {
                    pending.removeFirst(head)
                    head = 0
                }
                condition.unlock()
                let result = Result { try context.compress(job) }
                condition.lock()
                if job.buffer.capacity == ZstdFrames.batchBytes { pool.append(job.buffer) }
                switch result {
                case .success(let batch):
                    done[number] = (batch, job.size)
                    // Everyone wakes (the submitter among idle workers); the submitter needs only the next in order.
                    if submitterWaits && number == returned { condition.broadcast() }
                case .failure(let error):
                    failure = error as? OfflinePkgError ?? .io(path: "(zstd)", operation: "compress", Errno(EIO))
                }
            }
        }
    }

    fileprivate static func failure(_ call: String, _ status: Int) -> OfflinePkgError {
        let reason = status == 0 ? "allocation failed" : String(cString: ZSTD_getErrorName(status))
        return .io(path: "(zstd)", operation: "\(call) (\(reason))", Errno(ENOMEM))
    }
}
