import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// The normaliser's fast path (sixteen bytes per step, common URLs only) and its careful path must give
/// the same key as a plain reference for any URL — or, for the fast path, decline it.
@Suite struct LookupURLDifferentialTests {
    /// A fixed seed makes a failure reproducible.
    typealias Generator = SeededGenerator

    static let schemes = ["https://", "http://", "HTTPS://", "Http://", "hTTpS://", "ftp://", "https:/", "https//"]
    static let userinfo = ["user@", "u:p@", "a@b@", ":@"]
    static let ports = [":443", ":80", ":0443", ":080", ":8080", ":", ":x", ":0", ":00080", ":65535", ":44 3"]
    static let specialSegments = [
        ".", "..", "%2e", "%2E%2e", ".%2e", ".hidden", "a.b", "", "%41", "%2f", "%2F", "%00", "%zz", "%", "%4",
        "caf%C3%A9", "x y", "caf\u{e9}", "a:b", "a@b", "[x]", "..a", "a..", "%252e",
    ]
    static let endings = ["?v=1", "?a=/../b", "?", "#frag", "#/x/../y", "?q#f", "/", "/?x", "%", "/."]

    static func randomText(_ alphabet: String, _ length: Int, _ random: inout Generator) -> String {
        let characters = Array(alphabet)
        return String((0..<length).map { _ in characters.randomElement(using: &random)! })
    }

    static func randomURL(_ random: inout Generator) -> String {
        var url = schemes[Int.random(in: 0..<schemes.count, using: &random)]
        if Int.random(in: 0..<100, using: &random) < 10 {
            // Raw bytes after the scheme: whatever the grammar above does not think of.
            return url + randomText("/.%?#:@[]AZaz09-2eE", Int.random(in: 0...60, using: &random), &random)
        }
        if Int.random(in: 0..<100, using: &random) < 8 { url += userinfo.randomElement(using: &random)! }
        if Int.random(in: 0..<100, using: &random) < 5 {
            url += ["[::1]", "[::1", "[FE80::A]"].randomElement(using: &random)!
        } else {
            url += randomText("abcxyzABCXYZ0129-.", Int.random(in: 0...30, using: &random), &random)
        }
        if Int.random(in: 0..<100, using: &random) < 30 { url += ports.randomElement(using: &random)! }
        for _ in 0..<Int.random(in: 0...8, using: &random) {
            url += "/"
            if Int.random(in: 0..<100, using: &random) < 25 {
                url += specialSegments.randomElement(using: &random)!
            } else {
                url += randomText("abcdefghijklmnopqrstuvwxyzABCZ0189-_~.!$", Int.random(in: 1...20, using: &random), &random)
            }
        }
        if Int.random(in: 0..<100, using: &random) < 30 { url += endings.randomElement(using: &random)! }
        return url
    }

    static func check(_ url: String) -> String? {
        let expected = ReferenceLookupKey.key(url)
        let automatic = LookupURL.key(url, using: .commonFormThenCareful)
        let careful = LookupURL.key(url, using: .carefulOnly)
        let common = LookupURL.key(url, using: .commonFormOnly)
        if automatic != expected || careful != expected || (common != nil && common != expected) {
            func show(_ key: [UInt8]?) -> String { key.map { String(decoding: $0, as: UTF8.self) } ?? "nil" }
            return
                "\(url): reference \(show(expected)), automatic \(show(automatic)), careful \(show(careful)), fast \(show(common))"
        }
        return nil
    }

    @Test func randomURLsAgreeWithTheReference() {
        var random = Generator(seed: 0x0FF1_1E9C)
        var failures = [String]()
        var fastAccepted = 0
        let total = 30_000
        for _ in 0..<total {
            let url = Self.randomURL(&random)
            if let failure = Self.check(url) { failures.append(failure) }
            if LookupURL.key(url, using: .commonFormOnly) != nil { fastAccepted += 1 }
        }
        #expect(failures.isEmpty, "\(failures.count) disagreements, first: \(failures.prefix(5))")
        // The comparison means something only if the fast path answers a good share of them.
        #expect(fastAccepted > total / 10, "fast path took \(fastAccepted) of \(total)")
    }

    /// Hosts and paths of every length around the sixteen-byte steps, with a dot-segment, an escape or
    /// a delimiter at each position: a lane mask off by one byte, a "/" in the last lane of a block that
    /// does not carry to the "." in the next, or a last block that overlaps the one before it and
    /// judges a lane twice or not at all, shows here.
    @Test func blockBoundariesAgreeWithTheReference() {
        var failures = [String]()
        for hostLength in 1...35 {
            let host = String("abcdefghijKLMNOPQRSTUvwxyz0123456789".prefix(hostLength))
            for filler in 0...35 {
                let segment = String(repeating: "x", count: filler)
                for tail in [
                    "/../y.js", "/./y.js", "/.y", "/%2e%2e/y", "/y%20z", "?/../q", "#/../f", "/y.js", "/", "", "/.", "%",
                ] {
                    for port in ["", ":443", ":0443", ":8080", ":80"] {
                        let url = "https://\(host)\(port)/\(segment)\(tail)"
                        if let failure = Self.check(url) { failures.append(failure) }
                    }
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.count) disagreements, first: \(failures.prefix(5))")
        // The common form does take the fast path.
        #expect(
            LookupURL.key("https://App.Example.COM:443/assets/s1/app.js?v=2", using: .commonFormOnly)
                == Array("app.example.com/assets/s1/app.js".utf8))
        #expect(LookupURL.key("http://app.example.com:0080/x/y/", using: .commonFormOnly) == Array("app.example.com/x/y/".utf8))
        #expect(LookupURL.key("http://app.example.com:00081/x", using: .commonFormOnly) == Array("app.example.com:81/x".utf8))
        #expect(LookupURL.key("https://app.example.com/a/../b", using: .commonFormOnly) == nil)
    }

    /// The scans the normaliser uses (SSE2 on x86) and the portable ones (what a build without
    /// SSE2 runs) give the same masks and write the same bytes, for blocks of every byte value and of
    /// the URL bytes that matter; and both read each byte as a byte-by-byte test would.
    @Test func theScansAgreeWithTheirPortableForm() {
        var random = Generator(seed: 0x5CA1_AB1E)
        let interesting = Array("/?#:@[.%AZaz\\`{".utf8) + [0x00, 0x40, 0x5b, 0x60, 0x7b, 0x7f, 0x80, 0xc1, 0xda, 0xff]
        var failures = [String]()
        for round in 0..<20_000 {
            let block: [UInt8] = (0..<16).map { _ in
                round % 2 == 0 ? UInt8.random(in: 0...255, using: &random) : interesting.randomElement(using: &random)!
            }
            for (name, scan) in [("host", ByteScans.host), ("path", ByteScans.path)] {
                let (used, portable) = (scan(block, false), scan(block, true))
                if used.0 != portable.0 || used.1 != portable.1 {
                    failures.append("\(name) \(block): \(used) against portable \(portable)")
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.count) disagreements, first: \(failures.prefix(3))")
        #expect(ByteScans.usesSSE2 == Self.isX86, "x86 builds scan with SSE2, others with the portable form")

        let everyByte = (0...255).map(UInt8.init)
        for start in stride(from: 0, to: 256, by: 16) {
            let block = Array(everyByte[start..<start + 16])
            for portable in [false, true] {
                let (host, lowered) = ByteScans.host(block, portable: portable)
                #expect(lowered == block.map { (0x41...0x5a).contains($0) ? $0 | 0x20 : $0 })
                #expect(host.ends == Self.mask(block) { "/?#:".utf8.contains($0) })
                #expect(host.unusual == Self.mask(block) { "@[".utf8.contains($0) })
                let (path, copied) = ByteScans.path(block, portable: portable)
                #expect(copied == block)
                #expect(path.ends == Self.mask(block) { "?#".utf8.contains($0) })
                #expect(path.slashes == Self.mask(block) { $0 == UInt8(ascii: "/") })
                #expect(path.dots == Self.mask(block) { $0 == UInt8(ascii: ".") })
                #expect(path.percents == Self.mask(block) { $0 == UInt8(ascii: "%") })
            }
        }
    }

    static var isX86: Bool {
        #if arch(x86_64) || arch(i386)
        true
        #else
        false
        #endif
    }

    static func mask(_ block: [UInt8], _ matches: (UInt8) -> Bool) -> UInt32 {
        block.enumerated().reduce(0) { $0 | (matches($1.element) ? 1 << UInt32($1.offset) : 0) }
    }
}
