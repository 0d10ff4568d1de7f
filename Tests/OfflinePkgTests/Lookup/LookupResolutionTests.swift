import Foundation
import OfflinePkg
import Testing

/// docs/protocol.md#lookups as a table: each URL and the file that must answer it (`package:path`), or nil for a miss.
@Suite struct LookupResolutionTests {
    static let cases: [(url: String, answer: String?)] = [
        // Entry, files, and the host's root without a slash.
        ("https://app.example.com/", "home:index.html"),
        ("https://app.example.com", "home:index.html"),
        ("https://app.example.com/index.html", "home:index.html"),
        ("https://app.example.com/css/site.css", "home:css/site.css"),
        // Scheme and host compare case-insensitively; http and https alike; default ports drop.
        ("HTTPS://APP.Example.COM/css/site.css", "home:css/site.css"),
        ("http://app.example.com/js/app.js", "home:js/app.js"),
        ("https://app.example.com:443/js/app.js", "home:js/app.js"),
        ("http://app.example.com:80/js/app.js", "home:js/app.js"),
        ("https://app.example.com:0443/js/app.js", "home:js/app.js"),
        ("https://app.example.com:8443/js/app.js", nil),
        ("http://app.example.com:443/js/app.js", nil),
        ("https://app.example.com:x/js/app.js", nil),
        // The path is case-sensitive.
        ("https://app.example.com/JS/app.js", nil),
        // Query, fragment and userinfo are ignored.
        ("https://app.example.com/js/app.js?v=3#top", "home:js/app.js"),
        ("https://app.example.com/js/app.js#frag/../x", "home:js/app.js"),
        ("https://user:secret@app.example.com/js/app.js", "home:js/app.js"),
        // Percent-decoding; an encoded "/" or NUL is a miss.
        ("https://app.example.com/a%20b.html", "home:a b.html"),
        ("https://app.example.com/caf%C3%A9.txt", "home:caf\u{e9}.txt"),
        ("https://app.example.com/%6As/app.js", "home:js/app.js"),
        ("https://app.example.com/js%2Fapp.js", nil),
        ("https://app.example.com/js%2fapp.js", nil),
        ("https://app.example.com/js/app.js%00", nil),
        ("https://app.example.com/js/app.js%00.png", nil),
        ("https://app.example.com/%zz.js", nil),
        ("https://app.example.com/app.js%2", nil),
        // A "%" without two hex digits after it is a literal "%", as browsers send it.
        ("https://app.example.com/100%.txt", "home:100%.txt"),
        ("https://app.example.com/100%25.txt", "home:100%.txt"),
        ("https://app.example.com/100%.txt?x=%", "home:100%.txt"),
        // Dot segments, literal and encoded, are removed before matching.
        ("https://app.example.com/css/../js/./app.js", "home:js/app.js"),
        ("https://app.example.com/css/%2e%2e/js/app.js", "home:js/app.js"),
        ("https://app.example.com/css/%2E%2E/js/%2e/app.js", "home:js/app.js"),
        ("https://app.example.com/docs/guide/%2E%2E/page.html", "docs:page.html"),
        ("https://app.example.com/docs/..", "home:index.html"),
        ("https://app.example.com/docs/guide/.", "docs:guide/index.html"),
        // Paths that climb out of the root stay at the root: a miss, or the fallback of the tree.
        ("https://app.example.com/../../etc/hosts.txt", nil),
        ("https://app.example.com/%2e%2e/%2e%2e/etc/hosts.txt", nil),
        ("https://app.example.com/../../../index.html", "home:index.html"),
        ("https://app.example.com/../../etc/passwd", "home:index.html"),
        // The longest route wins and owns its prefix, even for a file only the outer package has.
        ("https://app.example.com/docs/", "docs:index.html"),
        ("https://app.example.com/docs/guide/", "docs:guide/index.html"),
        ("https://app.example.com/docs/only-in-home.js", nil),
        ("https://app.example.com/docs/missing", nil),
        // Navigation misses get the fallback; asset misses do not.
        ("https://app.example.com/some/route", "home:index.html"),
        ("https://app.example.com/some/route/", "home:index.html"),
        ("https://app.example.com/missing.png", nil),
        ("https://app.example.com/js/", "home:index.html"),
        // A folder (or route) named without its slash is no navigation miss: it is redirected to the slash
        // (`redirect(for:)`). A folder without the entry file, or a prefix of a folder's name, is one.
        ("https://app.example.com/help", nil),
        ("https://app.example.com/help/", "home:help/index.html"),
        ("https://app.example.com/docs", nil),
        ("https://app.example.com/js", "home:index.html"),
        ("https://app.example.com/hel", "home:index.html"),
        ("https://app.example.com/do", "home:index.html"),
        // IPv6 literal with a port.
        ("http://[::1]:8080/", "v6:index.html"),
        ("http://[::1]:8080/index.html?x", "v6:index.html"),
        ("http://[::1]/", nil),
        ("http://[::1:8080/", nil),
        // Not an absolute http(s) URL, or another host.
        ("ftp://app.example.com/index.html", nil),
        ("app.example.com/index.html", nil),
        ("https:/app.example.com/index.html", nil),
        ("https://", nil),
        ("", nil),
        ("https://other.example.com/index.html", nil),
        ("https://app.example.com.evil.test/index.html", nil),
    ]

    @Test(arguments: cases)
    func resolves(url: String, answer: String?) async throws {
        let fixture = try await LookupFixture.shared.get()
        let hit = fixture.store.resolve(url)
        #expect(hit.map { "\($0.packageID):\(Self.relativePath($0))" } == answer, "\(url)")
        if let hit {
            // Every answer is a file inside an active tree of this root.
            #expect(hit.path.hasPrefix(fixture.store.layout.root + "/trees/"))
            #expect(FileManager.default.fileExists(atPath: hit.path))
            #expect(!hit.path.contains("/../"))
        }
    }

    /// docs/protocol.md#lookups, step 4: the URL a folder named without its slash is redirected to.
    @Test(arguments: [
        ("https://app.example.com/help", "https://app.example.com/help/"),
        ("https://app.example.com/help?tab=2#top", "https://app.example.com/help/?tab=2#top"),
        ("https://app.example.com/docs", "https://app.example.com/docs/"),
        ("https://app.example.com/docs/guide", "https://app.example.com/docs/guide/"),
        ("https://app.example.com/js", nil), ("https://app.example.com/help/", nil), ("https://app.example.com/some/route", nil),
        ("https://app.example.com/docs/page.html", nil), ("https://other.example.com/help", nil),
    ])
    func redirectsAFolderWithoutItsSlash(url: String, location: String?) async throws {
        let fixture = try await LookupFixture.shared.get()
        #expect(fixture.store.redirect(for: url) == location, "\(url)")
    }

    @Test func answerCarriesTypeSizeVersionAndETag() async throws {
        let fixture = try await LookupFixture.shared.get()
        let css = try #require(fixture.store.resolve("https://app.example.com/css/site.css"))
        #expect(css.mimeType == "text/css; charset=utf-8")
        #expect(css.size == 6)
        #expect(css.version == "1.0.0")
        #expect(css.etag.hasPrefix("\"") && css.etag.count == 34)
        #expect(css.fileURL.path == css.path)
        #expect(fixture.store.resolve(URL(string: "https://app.example.com/css/site.css")!) == css)
    }

    /// "home:…" paths relative to the package tree.
    static func relativePath(_ resource: Resource) -> String {
        let parts = resource.path.components(separatedBy: "/trees/")[1]
        // <id>/<version>-<tree prefix>/<path>
        return parts.split(separator: "/", maxSplits: 2).dropFirst(2).joined()
    }
}
