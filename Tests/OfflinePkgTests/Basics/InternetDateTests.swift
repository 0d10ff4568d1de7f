import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// The root's JSON dates are read without ICU (`InternetDate`), to the same instants as Foundation's
/// `.iso8601`; what the fast form does not cover still goes through Foundation.
@Suite struct InternetDateTests {
    @Test(arguments: [
        "1970-01-01T00:00:00Z", "2026-12-01T14:26:52Z", "2000-02-29T23:59:59Z", "1999-12-31T00:00:01Z", "2400-03-01T12:00:00Z",
        "1900-02-28T06:07:08Z", "1583-01-01T00:00:00Z",
    ])
    func readsTheSameInstantAsFoundation(text: String) throws {
        let expected = try Date(text, strategy: .iso8601)
        #expect(InternetDate.parse(text) == expected)
    }

    @Test(arguments: ["2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "0000-01-01T00:00:00Z", "1582-10-15T00:00:00Z", "2026-12-01 14:26:52Z", "2026-12-01T14:26:52+01:00", "2026-12-01T14:26:52.5Z", ""])
    func leavesOtherFormsToFoundation(text: String) {
        #expect(InternetDate.parse(text) == nil)
    }

    @Test func theRootsDecoderRoundTripsWhatItsEncoderWritesAndStillReadsOffsets() throws {
        struct Stamp: Codable, Equatable { var at: Date }
        let stamp = Stamp(at: Date(timeIntervalSince1970: 1_796_135_212))
        #expect(try JSONCoding.decoder.decode(Stamp.self, from: Data(JSONCoding.encode(stamp))) == stamp)
        let offset = try JSONCoding.decoder.decode(Stamp.self, from: Data(#"{"at": "2026-12-01T15:26:52+01:00"}"#.utf8))
        #expect(offset.at == Date(timeIntervalSince1970: 1_796_135_212))
        let scratch = try TemporaryDirectory()
        try Data(#"{"at": "yesterday"}"#.utf8).write(to: URL(fileURLWithPath: scratch.path("stamp.json")))
        #expect(throws: OfflinePkgError.self) { try JSONCoding.load(Stamp.self, from: scratch.path("stamp.json")) }
    }

    @Test(arguments: [
        0, 1_796_135_212, 1_796_135_212.999, 951_868_799, 946_598_401, 13_574_606_400, -2_203_891_972, -12_212_553_600,
        -1.5, 253_402_300_799, 1_709_164_800, 4_107_542_399,
    ] as [TimeInterval])
    func writesWhatFoundationWrites(seconds: TimeInterval) {
        let date = Date(timeIntervalSince1970: seconds)
        #expect(InternetDate.format(date) == date.formatted(.iso8601), "\(seconds)")
    }

    @Test func theRootsEncoderWritesDatesAsISO8601Does() throws {
        struct Stamp: Codable { var at: Date; var list: [Date] }
        let stamp = Stamp(
            at: Date(timeIntervalSince1970: 1_796_135_212.25),
            list: [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -12_212_553_601), Date(timeIntervalSince1970: 253_402_300_800)])
        let foundation = JSONEncoder()
        foundation.dateEncodingStrategy = .iso8601
        foundation.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        #expect(String(decoding: JSONCoding.encode(stamp), as: UTF8.self) == String(decoding: try foundation.encode(stamp), as: UTF8.self))
        #expect(InternetDate.format(Date(timeIntervalSince1970: -12_212_553_601)) == nil)
        #expect(InternetDate.format(Date(timeIntervalSince1970: 253_402_300_800)) == nil)
    }
}
