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
}
