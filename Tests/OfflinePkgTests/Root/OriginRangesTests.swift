import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// `origins.json` records are stamped and aged by the clock the root is given, not the system's.
@Suite("Origin records and the clock")
struct OriginRangesTests {
    @Test func recordsAreStampedAndAgedByTheInjectedClock() throws {
        let root = try TemporaryDirectory(prefix: "origin-clock")
        let layout = CacheLayout(root: root.path)
        let url = try #require(URL(string: "https://cdn.example.com/app.tar"))
        let then = Date(timeIntervalSince1970: 1_000_000_000)
        OriginRanges(layout: layout, clock: .fixed(then)).remember(.single, for: url, server: "nginx")
        #expect(OriginRanges(layout: layout, clock: .fixed(then)).record(for: url)?.checked == then.timeIntervalSince1970)
        let dayLater = then.addingTimeInterval(86_400)
        #expect(OriginRanges(layout: layout, clock: .fixed(dayLater)).support(for: url) == .single)
        let weekLater = then.addingTimeInterval(OriginRanges.maximumAge)
        #expect(OriginRanges(layout: layout, clock: .fixed(weekLater)).support(for: url) == nil)
    }

    /// The manifest's protocol is kept beside how the origin takes ranges, and each survives the other
    /// being remembered; a record written before protocols were kept still reads.
    @Test func theManifestsProtocolIsKeptBesideTheRangeSupport() throws {
        let root = try TemporaryDirectory(prefix: "origin-http")
        let layout = CacheLayout(root: root.path)
        try FileSystem.makeDirectories(root.path)
        let url = try #require(URL(string: "https://cdn.example.com/manifest.json"))
        let old = #"{"https://cdn.example.com:443":{"support":"single","server":"nginx","checked":1000000000}}"#
        try FileSystem.writeAtomically(Array(old.utf8), to: layout.origins)
        let then = Date(timeIntervalSince1970: 1_000_000_000)
        #expect(OriginRanges(layout: layout, clock: .fixed(then)).support(for: url) == .single)
        OriginRanges(layout: layout, clock: .fixed(then)).remember(http: "h2", for: url, server: "nginx")
        OriginRanges(layout: layout, clock: .fixed(then)).remember(.multipart, for: url, server: "nginx")
        let record = OriginRanges(layout: layout, clock: .fixed(then)).record(for: url)
        #expect(record?.http == "h2" && record?.support == .multipart)
        // An origin first seen by its manifest: the protocol, and no range support yet.
        let other = try #require(URL(string: "https://other.example.com/m.json"))
        OriginRanges(layout: layout, clock: .fixed(then)).remember(http: "http/1.1", for: other, server: nil)
        #expect(OriginRanges(layout: layout, clock: .fixed(then)).http(for: other) == "http/1.1")
        #expect(OriginRanges(layout: layout, clock: .fixed(then)).support(for: other) == nil)
    }
}
