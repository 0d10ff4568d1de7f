import Testing

@testable import OfflinePkg

/// What a response says about the whole file's length, which a download holds against the manifest's
/// `size` before it reads the body.
@Suite struct ResponseHeadTests {
    @Test(
        arguments: [
            (200, ["content-length": "1234"], 1234),
            (200, ["content-length": " 1234 ", "content-encoding": "identity"], 1234),
            (206, ["content-range": "bytes 100-199/1234", "content-length": "100"], 1234),
            (206, ["content-range": "bytes 100-199/*"], nil),
            (200, [:], nil),
            // A coding the server applied anyway: its length is not the file's.
            (200, ["content-length": "80", "content-encoding": "gzip"], nil),
            (304, ["content-length": "1234"], nil),
        ] as [(Int, [String: String], Int64?)])
    func declaredTotalLength(status: Int, headers: [String: String], total: Int64?) {
        #expect(TransferResponseHead(status: status, headers: headers).declaredTotalLength == total)
    }
}
