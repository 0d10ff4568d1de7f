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

    static func lazyLibraries(in names: Set<String>) -> [String] {
        names.filter { name in lazy.contains { name.hasPrefix($0) } }.sorted()
    }

    @Test func commandsThatFetchAndUnpackNothingMapNoneOfTheirLibraries() throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")])
        try repo.publish()
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory(prefix: "offlinepkg-load")
        let manifest = nginx.url("manifest.json").absoluteString

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
