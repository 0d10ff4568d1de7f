import Foundation
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// Routes are written as a browser sends them, by one rule set that `publish` and the
/// manifest parser share: every other spelling is refused, with the one to write when there is one.
@Suite("Route syntax")
struct RouteSyntaxTests {
    static let canonical = [
        "https://m.example.com/home/", "http://m.example.com/", "http://127.0.0.1:8080/", "https://[::1]/",
        "https://[2001:db8::1]:8443/a/", "https://[::ffff:102:304]/", "https://[1:0:0:1::1]/", "https://[1:2:3:4:5:6:0:8]/", "https://xn--bcher-kva.example/",
        "https://m.example.com/a%20b/", "https://m.example.com/caf%C3%A9/", "https://my_host.example/", "https://m.example.com/a//b/",
        "http://m.example.com:65535/", "http://m.example.com:1/", "https://m.example.com:80/",
    ]

    @Test(arguments: canonical)
    func canonicalRoutesAreAccepted(_ route: String) throws {
        #expect(RouteSyntax.problem(with: route) == nil)
        try PublishRequest(site: "/s", id: "home", version: "1", routes: [route]).validate()
        _ = try Manifest(parsing: Self.manifest(route: route), source: "m.json")
    }

    /// A route and the spelling the refusal must suggest.
    static let fixable: [(String, String)] = [
        ("HTTPS://M.Example.com/home/", "https://m.example.com/home/"),
        ("https://M.EXAMPLE.COM/home/", "https://m.example.com/home/"),
        ("https://Bücher.example/", "https://xn--bcher-kva.example/"),
        ("https://bücher.example/", "https://xn--bcher-kva.example/"),
        // NFD ("u" + combining diaeresis) maps to the same name as NFC, as IDNA does.
        ("https://bu\u{308}cher.example/", "https://xn--bcher-kva.example/"),
        ("https://例え.テスト/", "https://xn--r8jz45g.xn--zckzah/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://127.1/", "http://127.0.0.1/"),
        ("http://0177.0.0.1/", "http://127.0.0.1/"),
        ("http://2130706433/", "http://127.0.0.1/"),
        ("http://127.0.0.1./", "http://127.0.0.1/"),
        ("http://[0:0::1]/", "http://[::1]/"),
        ("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"),
        ("https://[2001:DB8:0:0:0:0:0:1]/", "https://[2001:db8::1]/"),
        ("https://[2001:db8:0:0:1:0:0:1]/", "https://[2001:db8::1:0:0:1]/"),
        ("https://[2001:0db8::0001]/", "https://[2001:db8::1]/"),
        ("https://[::ffff:1.2.3.4]/", "https://[::ffff:102:304]/"),
        ("https://m.example.com:443/home/", "https://m.example.com/home/"),
        ("http://m.example.com:80/", "http://m.example.com/"),
        ("https://m.example.com:0443/", "https://m.example.com/"),
        ("https://m.example.com:08443/", "https://m.example.com:8443/"),
        ("https://m.example.com:/", "https://m.example.com/"),
        ("https://m.example.com\\home\\", "https://m.example.com/home/"),
        ("https://user:secret@m.example.com/", "https://m.example.com/"),
        ("https://m.example.com/home/?lang=en", "https://m.example.com/home/"),
        ("https://m.example.com/home/#top", "https://m.example.com/home/"),
        ("https://m.example.com/a b/", "https://m.example.com/a%20b/"),
        ("https://m.example.com/café/", "https://m.example.com/caf%C3%A9/"),
        ("https://m.example.com/a\"<>`{}/", "https://m.example.com/a%22%3C%3E%60%7B%7D/"),
        ("https://m.example.com/a/../b/", "https://m.example.com/b/"),
        ("https://m.example.com/./home/", "https://m.example.com/home/"),
        ("https://m.example.com/home/.", "https://m.example.com/home/"),
        ("https://m.example.com/home/%2e%2E/", "https://m.example.com/"),
        ("https://m.example.com/100%/", "https://m.example.com/100%25/"),
        ("https://m.example.com/home", "https://m.example.com/home/"),
        ("https://m.example.com", "https://m.example.com/"),
        // A combining mark right after "/" makes one Character of the two: the slash still separates
        // (found by the manifest fuzzer: the dot-segment before it was left in the suggestion).
        ("https://m.example.com/./\u{30F}x/", "https://m.example.com/%CC%8Fx/"),
        ("https://m.example.com/a/\u{301}/../b/", "https://m.example.com/a/b/"),
    ]

    @Test(arguments: fixable)
    func nonCanonicalRoutesAreRefusedWithTheFormToWrite(_ route: String, _ suggestion: String) throws {
        let problem = try #require(RouteSyntax.problem(with: route))
        #expect(problem.hasSuffix("write \"\(suggestion)\""), "\(problem)")
        #expect(problem.contains("is not written as a browser sends it ("))
        // The suggestion is itself canonical, and what a lookup of the same URL compares.
        #expect(RouteSyntax.problem(with: suggestion) == nil)
        #expect(RouteKey.normalized(suggestion) != nil)
        expectRefusedByPublishAndManifest(route, containing: "write \"\(suggestion)\"")
    }

    /// Routes no browser can send at all: refused with the reason, and no suggestion.
    static let unfixable: [(String, String)] = [
        ("ftp://m.example.com/", "is not an absolute http or https URL"),
        ("/home/", "is not an absolute http or https URL"),
        ("m.example.com/home/", "is not an absolute http or https URL"),
        ("https:/m.example.com/", "expected // after https:"),
        ("https://m.example.com:65536/", "has the port 65536, outside 1–65535"),
        ("https://m.example.com:0/", "has the port 0, outside 1–65535"),
        ("https://m.example.com:99999999999999999999/", "outside 1–65535"),
        ("https://m.example.com:8a/", "which is not a number"),
        ("https:///home/", "has no host"),
        ("https://a..b/", "has an empty label"),
        ("https://.m.example.com/", "has an empty label"),
        ("http://1.2.3.4.5/", "ends in a number but is not an IPv4 address"),
        ("http://256.0.0.1/", "ends in a number but is not an IPv4 address"),
        ("http://example.0x/", "ends in a number but is not an IPv4 address"),
        ("http://[1::2::3]/", "is not an IPv6 address"),
        ("http://[::1%25eth0]/", "is not an IPv6 address"),
        ("http://[::1/", "without its closing ]"),
        ("http://[::1]x/", "after its IPv6 address"),
        ("https://m.exa mple.com/", "in its host, which a host name never holds"),
        ("https://ex%41mple.com/", "in its host, which a host name never holds"),
        ("https://m.example.com/%2F/", "an escaped / or NUL that no lookup matches"),
        ("https://m.example.com/%00/", "an escaped / or NUL that no lookup matches"),
        ("https://m.example.com/a\u{0}b/", "contains the control character U+0000"),
        ("https://m.example.com/a\u{85}b/", "contains the control character U+0085"),
        ("https://m.example.com/a\u{7f}/", "contains the control character U+007F"),
        // Too long for DNS in any spelling (found by the fuzzer: its xn-- form was suggested, then refused).
        ("https://" + String(repeating: "b\u{FC}", count: 40) + ".example/", "longer than 63 bytes"),
        ("https://" + Array(repeating: String(repeating: "a", count: 60), count: 5).joined(separator: ".") + "/", "longer than 253 bytes"),
    ]

    @Test(arguments: unfixable)
    func impossibleRoutesAreRefusedSayingWhy(_ route: String, _ reason: String) throws {
        let problem = try #require(RouteSyntax.problem(with: route))
        #expect(problem.contains(reason), "\(problem)")
        #expect(!problem.contains("write \""))
        expectRefusedByPublishAndManifest(route, containing: reason)
    }

    func expectRefusedByPublishAndManifest(_ route: String, containing text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(sourceLocation: sourceLocation) {
            try PublishRequest(site: "/s", id: "home", version: "1", routes: [route]).validate()
        } throws: { error in
            guard case .invalidArgument(let message) = error as? OfflinePkgError else { return false }
            return message.hasPrefix("route \"") && message.contains(text)
        }
        #expect(sourceLocation: sourceLocation) {
            try Manifest(parsing: Self.manifest(route: route), source: "m.json")
        } throws: { error in
            guard case .invalidManifest(_, let field, let reason) = error as? OfflinePkgError else { return false }
            return field == "packages[0] (home).routes[0]" && reason.contains(text)
        }
    }

    static func manifest(route: String) -> [UInt8] {
        let object: [String: Any] = [
            "format": 1, "sequence": 1,
            "packages": [
                [
                    "id": "home", "version": "1", "routes": [route], "tree": String(repeating: "b", count: 64),
                    "archive": ["url": "a.tar.gz", "sha256": String(repeating: "a", count: 64), "size": 1],
                ]
            ],
        ]
        return Array(try! JSONSerialization.data(withJSONObject: object))
    }

    @Test func theMessageNamesEveryFix() throws {
        let problem = try #require(RouteSyntax.problem(with: "HTTPS://User@Bücher.Example:443/a b/?q"))
        #expect(
            problem
                == "\"HTTPS://User@Bücher.Example:443/a b/?q\" is not written as a browser sends it (the scheme is lowercase; "
                + "userinfo is never sent in a request; an international host is sent in its xn-- (IDNA) form; "
                + "the default port :443 is never sent; a query is never part of a route; "
                + "spaces, quotes, <>`{} and non-ASCII bytes of a path are sent percent-encoded): "
                + "write \"https://xn--bcher-kva.example/a%20b/\"")
    }

    /// RFC 3492 §7.1 sample strings, and the names the issue reported.
    @Test(arguments: [
        ("bücher", "bcher-kva"), ("münchen", "mnchen-3ya"), ("例え", "r8jz45g"), ("テスト", "zckzah"),
        ("3年B組金八先生", "3B-ww4c5e180e575a65lsy2b"), ("安室奈美恵-with-SUPER-MONKEYS", "-with-SUPER-MONKEYS-pc58ag80a8qai00g7n9n"),
        ("ليهمابتكلموشعربي؟", "egbpdaj6bu4bxfgehfvwxn"), ("he", "he-"),
    ])
    func punycodeMatchesRFC3492(_ label: String, _ encoded: String) {
        #expect(Punycode.encode(label) == encoded)
    }

    /// Routes that differ only in the scheme are one prefix to a device, so publish refuses the second.
    @Test func httpAndHTTPSAreTheSamePrefix() {
        #expect {
            try PublishRequest(site: "/s", id: "home", version: "1", routes: ["https://m.example.com/", "http://m.example.com/"])
                .validate()
        } throws: { "\($0)".contains("is given twice") }
    }
}
