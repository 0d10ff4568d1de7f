import OfflinePkg
import Testing

@testable import OfflinePkgServer

#if canImport(Glibc)
import Glibc
#endif

/// A pass-through body (POST and other methods under a runtime rule) is written into a pipe on MHD's
/// thread, the thread of a lane that serves all its connections: a body that fits the pipe never
/// holds them up, however slow upstream is to read it.
@Suite struct PassThroughPipeTests {
    @Test func aMebibyteBodyFitsThePipeWithNoReader() throws {
        let ends = try #require(RuntimeCacheResponder.bodyPipe(for: Int64(RuntimeCacheResponder.bodyPipeCapacity)))
        defer { for end in ends { close(end) } }
        #expect(Socket.pipeCapacity(ends[1]) >= RuntimeCacheResponder.bodyPipeCapacity)
        #expect(fcntl(ends[0], F_GETFD) & FD_CLOEXEC != 0 && fcntl(ends[1], F_GETFD) & FD_CLOEXEC != 0)

        // Non-blocking here only so that a pipe too small fails the test instead of hanging it.
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        let body = [UInt8](repeating: 0x61, count: Int(RuntimeCacheResponder.bodyPipeCapacity))
        var written = 0
        while written < body.count {
            let count = body.withUnsafeBytes { write(ends[1], $0.baseAddress! + written, body.count - written) }
            if count <= 0 { break }
            written += count
        }
        #expect(written == body.count, "the pipe took \(written) of \(body.count) bytes before a reader")
    }

    /// The kernel charges a pipe's capacity to its user's pipe budget, used or not: a body that fits
    /// the default pipe keeps it, and one of unknown length (chunked) asks for the larger one.
    @Test func onlyALargeOrUnknownBodyAsksForTheLargerPipe() throws {
        var plain: [Int32] = [0, 0]
        try #require(pipe(&plain) == 0)
        let standard = Socket.pipeCapacity(plain[1])
        for end in plain { close(end) }
        for (length, expected) in [(Int64(100), standard), (Int64(standard), standard), (nil, RuntimeCacheResponder.bodyPipeCapacity)] {
            let ends = try #require(RuntimeCacheResponder.bodyPipe(for: length))
            #expect(Socket.pipeCapacity(ends[1]) == expected, "a body of \(length.map(String.init) ?? "unknown length") bytes")
            for end in ends { close(end) }
        }
    }
}
