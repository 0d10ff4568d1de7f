internal import CZstd
import Foundation
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// Compresses byte strings into independent zstd frames with libzstd, on threads of their own: the
/// frames of a chunked archive (SPEC §13) depend on nothing but their own input, so each is one
/// `ZSTD_compress2` call with fixed parameters, and the same input gives the same bytes whichever
/// worker made it. The caller submits inputs one by one, in archive order, and gets the frames back in
/// that order while it goes on reading the next files: reading and hashing overlap the compression.
///
/// One compression context per worker, kept for the whole archive (a context costs ~1 MB at level 3).
/// At most `inFlightLimit` input bytes wait or compress at a time; `submit` waits past that, so a
/// publish's memory stays a few tens of MiB whatever the site.
package final class ZstdFrames {
    private let shared: Shared
    let level: Int

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
            let thread = Thread { shared.work(with: context) }
            thread.name = "zstd frames"
            thread.start()
        }
    }

    /// Stops the workers of an archive that was never finished (an error on the way).
    deinit { shared.close() }

    /// Queues `input` as the next frame. Returns the frames finished since the last call, in the order
    /// they were submitted; waits first while more than the in-flight limit is queued.
    package func submit(_ input: [UInt8]) throws -> [[UInt8]] {
        try shared.submit(input)
    }

    /// Waits for every queued frame and returns the ones not yet returned, in order.
    package func finish() throws -> [[UInt8]] {
        try shared.finish()
    }

    /// JSON bytes of the file index per frame. Fixed, so the index's bytes do not depend on the cores.
    static let fileIndexPiece = 256 << 10

    /// The file index (SPEC §13), compressed: fetched by every device that updates by files, so small,
    /// but written at the end of every publish, after the last range is known, so not slow either.
    /// Frames of `fileIndexPiece` bytes of JSON compressed side by side (a device decompresses the
    /// concatenation as one stream) with zstd's optimal parser (btopt, 10 % smaller than levels 9-15's
    /// on this JSON of hex hashes), made cheap: matches of 5 bytes and more (a 3- or 4-byte match in hex
    /// is noise the parser weighs at every byte), 4 candidates, 128k/256k-entry tables. On the
    /// 10,000-file index (1.8 MB of JSON) 424,056 B for 0.16 s of CPU, against 424,065 B for 0.43-0.57 s
    /// with level 16's btultra and one candidate before (wave 4); 148,641 B at 3,000 files (148,531)
    /// (docs/benchmarks.md, "Publish speed, wave 5").
    package static func fileIndex(_ json: [UInt8], workers: Int = ProcessInfo.processInfo.activeProcessorCount) throws -> [UInt8] {
        let pieces = stride(from: 0, to: max(json.count, 1), by: fileIndexPiece).map { Array(json[$0..<min($0 + fileIndexPiece, json.count)]) }
        let tuning: [(ZSTD_cParameter, Int32)] = [
            (ZSTD_c_strategy, Int32(ZSTD_btopt.rawValue)), (ZSTD_c_minMatch, 5), (ZSTD_c_targetLength, 128), (ZSTD_c_searchLog, 2),
            (ZSTD_c_chainLog, 17), (ZSTD_c_hashLog, 18),
        ]
        let frames = try ZstdFrames(level: 16, tuning: tuning, workers: min(workers, pieces.count), inFlightLimit: Int.max)
        var compressed = [UInt8]()
        for piece in pieces { try frames.submit(piece).forEach { compressed += $0 } }
        try frames.finish().forEach { compressed += $0 }
        return compressed
    }

    /// A zstd compression context with the archive's parameters and an output buffer kept between frames.
    final class Context: @unchecked Sendable {
        private let context: OpaquePointer
        private var output = [UInt8]()

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

        /// One frame of `input`: compressed into the kept buffer, returned as an array of its own size.
        func compress(_ input: UnsafeRawBufferPointer) throws -> [UInt8] {
            let bound = ZSTD_compressBound(input.count)
            if output.count < bound {
                // Uninitialised: zstd writes the bytes it returns, and zero-filling the bound costs a memset.
                output = [UInt8](unsafeUninitializedCapacity: bound) { _, count in count = bound }
            }
            let status = output.withUnsafeMutableBytes { out in
                ZSTD_compress2(context, out.baseAddress, bound, input.baseAddress, input.count)
            }
            guard ZSTD_isError(status) == 0 else { throw ZstdFrames.failure("ZSTD_compress2", status) }
            return Array(output[0..<status])
        }
    }

    /// The queue between the submitting thread and the workers, guarded by `condition`.
    private final class Shared: @unchecked Sendable {
        private let condition = NSCondition()
        private let inFlightLimit: Int
        /// Inputs not yet taken by a worker, from `pending[head]` on; `taken` is the next one's number.
        private var pending = [[UInt8]]()
        private var head = 0
        private var taken = 0
        private var submitted = 0
        /// Finished frames by number, with their input's size, until they are returned in order.
        private var done = [Int: (frame: [UInt8], inputSize: Int)]()
        private var returned = 0
        private var inFlightBytes = 0
        /// Input bytes submitted and not yet taken by a worker.
        private var queuedBytes = 0
        private var running: Int
        /// Workers waiting for an input, and whether the submitting thread waits for a frame: a wake-up
        /// is sent only to someone waiting (a futex call per small frame would cost more than its zstd),
        /// and an idle worker only once `batchBytes` are queued (or the submitter waits, or the input
        /// ends), to take them all at once: one wake-up per ~20 small files, not one per file.
        private var idleWorkers = 0
        private var submitterWaits = false
        private var closed = false
        private var failure: OfflinePkgError?

        init(inFlightLimit: Int, workers: Int) {
            self.inFlightLimit = inFlightLimit
            running = workers
        }

        func submit(_ input: [UInt8]) throws -> [[UInt8]] {
            condition.lock()
            defer { condition.unlock() }
            if let failure { throw failure }
            pending.append(input)
            submitted += 1
            inFlightBytes += input.count
            queuedBytes += input.count
            if idleWorkers > 0 && queuedBytes >= Shared.batchBytes { condition.signal() }
            var frames = takeFinished()
            while inFlightBytes > inFlightLimit && failure == nil {
                if idleWorkers > 0 { condition.signal() }
                waitForFrame()
                frames += takeFinished()
            }
            if let failure { throw failure }
            return frames
        }

        func finish() throws -> [[UInt8]] {
            condition.lock()
            defer { condition.unlock() }
            closed = true
            condition.broadcast()
            var frames = takeFinished()
            while returned < submitted && failure == nil {
                waitForFrame()
                frames += takeFinished()
            }
            if let failure { throw failure }
            return frames
        }

        func close() {
            condition.lock()
            closed = true
            pending.removeAll()
            head = 0
            taken = submitted
            queuedBytes = 0
            condition.broadcast()
            condition.unlock()
        }

        /// Waits (with the lock held) until a worker files the next frame in order, or fails.
        private func waitForFrame() {
            submitterWaits = true
            condition.wait()
            submitterWaits = false
        }

        /// The frames ready to go out in order (called with the lock held).
        private func takeFinished() -> [[UInt8]] {
            var frames = [[UInt8]]()
            while let next = done.removeValue(forKey: returned) {
                frames.append(next.frame)
                inFlightBytes -= next.inputSize
                returned += 1
            }
            return frames
        }

        /// Input bytes a worker takes at a time, at least one input: a batch of small files per wake-up.
        /// How the inputs are batched changes no byte of any frame.
        static let batchBytes = 256 << 10

        /// A worker's loop: take the oldest inputs (up to `batchBytes`), compress them unlocked, file the
        /// frames under their numbers.
        func work(with context: Context) {
            condition.lock()
            defer {
                running -= 1
                condition.broadcast()
                condition.unlock()
            }
            while failure == nil {
                guard taken < submitted else {
                    if closed { return }
                    idleWorkers += 1
                    condition.wait()
                    idleWorkers -= 1
                    continue
                }
                let first = taken
                var batch = [[UInt8]]()
                var batchSize = 0
                while taken < submitted && (batch.isEmpty || batchSize + pending[head].count <= Shared.batchBytes) {
                    batchSize += pending[head].count
                    batch.append(pending[head])
                    pending[head] = []
                    head += 1
                    taken += 1
                }
                queuedBytes -= batchSize
                if head >= 1024 && head * 2 >= pending.count {
                    pending.removeFirst(head)
                    head = 0
                }
                condition.unlock()
                let result = Result { try batch.map { input in try input.withUnsafeBytes { try context.compress($0) } } }
                condition.lock()
                switch result {
                case .success(let frames):
                    for (offset, frame) in frames.enumerated() { done[first + offset] = (frame, batch[offset].count) }
                    // Everyone wakes (the submitter among idle workers); the submitter needs only the next in order.
                    if submitterWaits && done[returned] != nil { condition.broadcast() }
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
