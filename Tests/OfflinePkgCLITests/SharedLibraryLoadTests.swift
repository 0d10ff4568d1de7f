import Foundation
import OfflinePkgTestSupport
import Testing

/// A command loads only the shared libraries it uses: libcurl, libarchive, libcrypto, libmicrohttpd and
/// libsqlite3 (and the forty libraries they need) are opened at their first call, not at start-up, so
/// `lookup`, `status` and `--version` map none of them and a no-op sync only libcurl's (libcrypto is
/// one of them). The dynamic loader names every object it opens under `LD_DEBUG=files`.
@Suite struct SharedLibraryLoadTests {
    static let lazy = ["libcurl.so", "libarchive.so", "libcrypto.so", "libmicrohttpd.so", "libsqlite3.so"]

    /// The sonames `offlinepkg arguments…` opened, read from the loader's own account.
    static func loaded(_ arguments: [String]) throws -> Set<String> {
        let result = try OfflinePkgBinary.run(arguments, environment: ProcessInfo.processInfo.environment.merging(["LD_DEBUG": "files"]) { $1 })
        try #require(result.status == 0, "\(arguments.joined(separator: " ")): \(result.stderr.suffix(2000))")
        var names = Set<String>()
        for line in result.stderr.split(separator: "\n") {
            // "  1234:	file=libcurl.so.4 [0];  dynamically loaded by …"
            guard let start = line.range(of: "file=") else { continue }
            names.insert(String(line[start.upperBound...].prefix { $0 != " " }))
        }
        return names
    }

    /// A repository of one package served by nginx, and an empty root to sync it into.
    static func servedRepository(prefix: String) throws -> (TestRepository, NginxServer, TemporaryDirectory) {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")])
        try repo.publish()
        return (repo, try NginxServer(documentRoot: repo.path), try TemporaryDirectory(prefix: prefix))
    }

    static func lazyLibraries(in names: Set<String>) -> [String] {
        names.filter { name in lazy.contains { name.hasPrefix($0) } }.sorted()
    }

    @Test func commandsThatFetchAndUnpackNothingMapNoneOfTheirLibraries() throws {
        let (repo, nginx, root) = try Self.servedRepository(prefix: "offlinepkg-load")
        let manifest = nginx.url("manifest.json").absoluteString
        defer { withExtendedLifetime(repo) {} }

        // A cold sync needs both, and the stubs find them.
        let cold = try Self.loaded(["sync", manifest, "--root", root.path, "--quiet"])
        #expect(cold.contains { $0.hasPrefix("libcurl.so") } && cold.contains { $0.hasPrefix("libarchive.so") }, "\(cold.sorted())")
        #expect(!cold.contains { $0.hasPrefix("libmicrohttpd.so") }, "\(cold.sorted())")

        for arguments in [
            ["lookup", "https://m.example.com/", "--root", root.path], ["status", "--root", root.path],
            ["status", "--json", "--root", root.path], ["--version"],
        ] {
            let names = try Self.loaded(arguments)
            #expect(Self.lazyLibraries(in: names).isEmpty, "\(arguments.joined(separator: " ")) loaded \(Self.lazyLibraries(in: names))")
        }

        // A sync that finds the manifest unchanged (304) fetches and unpacks nothing: libcurl and what it
        // needs, libcrypto among them.
        let noop = try Self.loaded(["sync", manifest, "--root", root.path, "--quiet"])
        #expect(Self.lazyLibraries(in: noop) == ["libcrypto.so.3", "libcurl.so.4"], "\(noop.sorted())")
        #expect(
            nginx.accessLog().contains { $0.uri == "/manifest.json" && $0.status == 304 },
            "the second sync was not a conditional request answered 304: \(nginx.accessLog())")
    }

    /// libcurl's tree (libssl, libcrypto, GnuTLS, krb5, ...) looks up symbols in itself first, as in
    /// curl's own process: not first in the binary and its libraries, which costs each of its thousands
    /// of relocations a look into every one of them, and which in a release binary (which exports its
    /// lazy stubs) bound libssl's `EVP_*` to CCrypto's stubs. `LD_DEBUG=scopes` prints the lookup scopes
    /// of each object opened: RTLD_DEEPBIND puts the library's own first.
    @Test func libcurlsTreeLooksUpInItselfFirst() throws {
        let (repo, nginx, root) = try Self.servedRepository(prefix: "offlinepkg-scopes")
        let manifest = nginx.url("manifest.json").absoluteString
        defer { withExtendedLifetime(repo) {} }
        for run in ["cold", "no-op"] {
            let result = try OfflinePkgBinary.run(
                ["sync", manifest, "--root", root.path, "--quiet"],
                environment: ProcessInfo.processInfo.environment.merging(["LD_DEBUG": "scopes"]) { $1 })
            try #require(result.status == 0, "\(run) sync: \(result.stderr.suffix(2000))")
            // "  1234:	object=/lib/…/libcurl.so.4 [0]" then "  1234:	 scope 0: /lib/…/libcurl.so.4 /lib/…/libnghttp2.so.14 …"
            let lines = result.stderr.split(separator: "\n").map { $0.drop { $0 != ":" }.dropFirst().drop { $0 == "\t" || $0 == " " } }
            var opened = 0
            for (index, line) in lines.enumerated() where line.hasPrefix("object=") && index + 1 < lines.count {
                let object = String(line.dropFirst("object=".count).prefix { $0 != " " })
                guard ["libcurl.so.4", "libcrypto.so.3"].contains(where: { object.hasSuffix("/" + $0) }) else { continue }
                opened += 1
                // The first scope it looks up in: libcurl's own tree (libcrypto, opened by CCrypto once
                // libcurl brought it, keeps that scope first), never the executable's.
                let first = lines[index + 1].split(separator: " ").dropFirst(2).first.map(String.init) ?? ""
                #expect(first.hasSuffix("/libcurl.so.4") || first.hasSuffix("/libcrypto.so.3"), "\(run) sync: \(object) looks up first in \(first)")
            }
            #expect(opened > 0, "\(run) sync opened no libcurl: \(result.stderr.suffix(2000))")
        }
    }

    /// The entry point waits for the command on the main thread instead of ending it in `dispatch_main`,
    /// whose `pthread_exit` unwinds the thread: glibc opens libgcc_s for its unwinder ("opening file=…
    /// libgcc_s"), which then reads the binary's unwind tables, pages every command kept for nothing.
    @Test func theMainThreadEndsWithoutUnwinding() throws {
        let root = try TemporaryDirectory(prefix: "offlinepkg-unwind")
        for arguments in [["--version"], ["status", "--root", root.path]] {
            let result = try OfflinePkgBinary.run(
                arguments, environment: ProcessInfo.processInfo.environment.merging(["LD_DEBUG": "files"]) { $1 })
            try #require(result.status == 0, "\(arguments.joined(separator: " ")): \(result.stderr.suffix(2000))")
            let unwinder = result.stderr.split(separator: "\n").filter { $0.contains("opening file=") && $0.contains("libgcc_s") }
            #expect(unwinder.isEmpty, "\(arguments.joined(separator: " ")) unwound its main thread: \(unwinder)")
        }
    }
}
