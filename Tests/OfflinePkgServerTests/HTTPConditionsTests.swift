import Testing

@testable import OfflinePkgServer

@Suite struct HTTPConditionsTests {
    static let etag = "\"0123456789abcdef0123456789abcdef\""

    @Test(arguments: [
        (etag, true), ("*", true), ("W/" + etag, true), ("\"other\", " + etag, true), (" \"a\" ,\t\(etag) ", true),
        ("\"other\"", false), ("", false), ("\"0123456789abcdef\"", false),
    ])
    func ifNoneMatch(header: String, hits: Bool) {
        #expect(HTTPConditions.noneMatchHits(Substring(header), etag: Self.etag) == hits)
    }

    @Test(arguments: [
        ("bytes=0-4", RangeRequest.partial(start: 0, end: 4)),
        ("bytes=5-", .partial(start: 5, end: 9)),
        ("bytes=-3", .partial(start: 7, end: 9)),
        ("bytes=-30", .partial(start: 0, end: 9)),
        ("bytes=8-100", .partial(start: 8, end: 9)),
        ("bytes=9-9", .partial(start: 9, end: 9)),
        ("bytes=10-", .unsatisfiable),
        ("bytes=10-20", .unsatisfiable),
        ("bytes=-0", .unsatisfiable),
        ("bytes=0-1,3-4", .whole),
        ("bytes=5-2", .unsatisfiable),
        ("bytes=a-b", .whole),
        ("items=0-4", .whole),
        ("bytes=", .whole),
    ])
    func range(header: String, expected: RangeRequest) {
        #expect(RangeRequest(header: Substring(header), size: 10) == expected)
    }

    @Test func rangeOfEmptyFileIsUnsatisfiable() {
        #expect(RangeRequest(header: "bytes=0-", size: 0) == .unsatisfiable)
        #expect(RangeRequest(header: "bytes=-5", size: 0) == .unsatisfiable)
    }
}
