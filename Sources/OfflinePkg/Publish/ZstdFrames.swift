internal import CZstd
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Compresses byte strings into independent zstd frames with libzstd, on every core: the frames of a
/// chunked archive (SPEC §13) depend on nothing but their own input, so each is one `ZSTD_compress2`
/// call with fixed parameters, and the same input gives the same bytes whichever worker made it.
/// One compression context per worker, kept for the whole archive (a context costs ~1 MB at level 3).
package final class ZstdFrames {
    private let contexts: [OpaquePointer]
    let level: Int

    /// `workers` contexts (at least one) at compression `level`, each frame with its content size and
    /// a checksum (4 bytes a frame: a damaged range fails in the decoder, before any hash is computed).
    package init(level: Int, workers: Int) throws {
        self.level = level
        var contexts = [OpaquePointer]()
        for _ in 0..<max(1, workers) {
            guard let context = ZSTD_createCCtx() else { throw Self.failure("ZSTD_createCCtx", 0) }
            contexts.append(context)
            for (parameter, value) in [(ZSTD_c_compressionLevel, Int32(level)), (ZSTD_c_checksumFlag, 1), (ZSTD_c_contentSizeFlag, 1)] {
                let status = ZSTD_CCtx_setParameter(context, parameter, value)
                if ZSTD_isError(status) != 0 {
                    contexts.forEach { ZSTD_freeCCtx($0) }
                    throw Self.failure("ZSTD_CCtx_setParameter", status)
                }
            }
        }
        self.contexts = contexts
    }

    deinit { contexts.forEach { ZSTD_freeCCtx($0) } }

    /// One frame per input, in the inputs' order, compressed by up to one worker per context.
    package func compress(_ inputs: [[UInt8]]) throws -> [[UInt8]] {
        if inputs.count <= 1 || contexts.count == 1 {
            return try inputs.map { try Self.compress($0, context: contexts[0]) }
        }
        let outputs = Mutex([[UInt8]?](repeating: nil, count: inputs.count))
        let firstError = Mutex<OfflinePkgError?>(nil)
        let next = Atomic<Int>(0)
        let owned = contexts.map { SendableContext(pointer: $0) }
        DispatchQueue.concurrentPerform(iterations: min(owned.count, inputs.count)) { worker in
            while true {
                let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard index < inputs.count else { return }
                do {
                    let frame = try Self.compress(inputs[index], context: owned[worker].pointer)
                    outputs.withLock { $0[index] = frame }
                } catch {
                    firstError.withLock { if $0 == nil { $0 = error as? OfflinePkgError } }
                    return
                }
            }
        }
        if let error = firstError.withLock({ $0 }) { throw error }
        return outputs.withLock { $0.map { $0! } }
    }

    /// One frame of `input` at `level` (the file index: written once, read by every device, so small).
    package static func frame(_ input: [UInt8], level: Int) throws -> [UInt8] {
        let frames = try ZstdFrames(level: level, workers: 1)
        return try compress(input, context: frames.contexts[0])
    }

    private static func compress(_ input: [UInt8], context: OpaquePointer) throws -> [UInt8] {
        var status = 0
        // Uninitialised: zstd writes the bytes it returns, and zero-filling the bound first costs a memset
        // of the whole input size again per frame.
        let output = [UInt8](unsafeUninitializedCapacity: ZSTD_compressBound(input.count)) { out, count in
            status = input.withUnsafeBytes { source in
                ZSTD_compress2(context, out.baseAddress, out.count, source.baseAddress, source.count)
            }
            count = ZSTD_isError(status) == 0 ? status : 0
        }
        guard ZSTD_isError(status) == 0 else { throw failure("ZSTD_compress2", status) }
        return output
    }

    private static func failure(_ call: String, _ status: Int) -> OfflinePkgError {
        let reason = status == 0 ? "allocation failed" : String(cString: ZSTD_getErrorName(status))
        return .io(path: "(zstd)", operation: "\(call) (\(reason))", Errno(ENOMEM))
    }
}

/// A compression context handed to exactly one worker of `concurrentPerform` (its index owns it).
private struct SendableContext: @unchecked Sendable {
    let pointer: OpaquePointer
}
