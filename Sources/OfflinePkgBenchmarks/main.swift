// Measures `PackageStore.resolve` on an active set of about 4,000 files, installed the way a device
// installs one: a generated site published with bsdtar and synced through `Updater` from a file://
// manifest. Prints the median ns/op of several runs over a mix of hits and misses.
//
//     swift build -c release --product OfflinePkgBenchmarks && .build/release/OfflinePkgBenchmarks
import Foundation
import OfflinePkg
import OfflinePkgTestSupport

let fileCount = Int(ProcessInfo.processInfo.environment["BENCH_FILES"] ?? "") ?? 4000
let runs = Int(ProcessInfo.processInfo.environment["BENCH_RUNS"] ?? "") ?? 9
let operationsPerRun = Int(ProcessInfo.processInfo.environment["BENCH_OPERATIONS"] ?? "") ?? 400_000
guard fileCount > 100, runs > 0, operationsPerRun > 0 else {
    fatalError("BENCH_FILES takes a count above 100, BENCH_RUNS and BENCH_OPERATIONS counts of 1 or more")
}

// BENCH_ROOT keeps the site, repository and root in that folder for the next run, which then only
// opens them: for a run under valgrind, which cannot spawn the bsdtar that publishing takes.
let kept = ProcessInfo.processInfo.environment["BENCH_ROOT"].flatMap { $0.isEmpty ? nil : $0 }
let scratch = kept == nil ? try TemporaryDirectory(prefix: "offlinepkg-bench") : nil
func scratchPath(_ relative: String) -> String { scratch?.path(relative) ?? kept! + "/" + relative }
let site = scratchPath("site/app")
let docs = scratchPath("site/docs")
let paths = try SiteWriter.generateLargeSite(into: site, count: fileCount - 50)
let docPaths = try SiteWriter.generateLargeSite(into: docs, count: 50)
// A kept set-up names its size: one of another BENCH_FILES would measure another table.
let stamp = scratchPath("files")
if kept != nil, let made = try? String(contentsOfFile: stamp, encoding: .utf8), made != String(fileCount) {
    fatalError("BENCH_ROOT \(kept!) holds a set-up of \(made) files, not \(fileCount): name an empty folder")
}
let store = try PackageStore(root: URL(fileURLWithPath: scratchPath("root")), options: .init(watchInterval: 0))
let reused = store.activeSet.packages.count == 2
if !reused {
    let repository = try RepositoryBuilder(directory: scratchPath("repo"))
    try repository.publish(
        sequence: 1,
        packages: [
            .init(
                id: "app", version: "1.0.0", routes: ["https://bench.offlinepkg.test/"],
                fallback: "assets/section-0/group-0/index.html", site: site),
            .init(id: "docs", version: "1.0.0", routes: ["https://bench.offlinepkg.test/docs/"], site: docs),
        ])
    _ = try await Updater(store: store, manifestURL: repository.manifestURL).sync()
    if kept != nil { try String(fileCount).write(toFile: stamp, atomically: true, encoding: .utf8) }
}

// Three hits to one miss, in the shapes a web view asks for: assets, folder URLs, mixed-case hosts
// with ports and queries, nested routes, 404s and navigation fallbacks.
var urls = [String]()
for (number, path) in paths.enumerated() where number % 7 == 0 {
    urls.append("https://bench.offlinepkg.test/" + path)
    if path.hasSuffix("index.html") {
        urls.append("https://bench.offlinepkg.test/" + path.dropLast("index.html".count))
    }
    urls.append("HTTPS://Bench.OfflinePkg.test:443/\(path)?v=\(number)")
    urls.append("https://bench.offlinepkg.test/" + path.replacingOccurrences(of: ".", with: "-missing."))
}
for path in docPaths { urls.append("https://bench.offlinepkg.test/docs/" + path) }
for number in 0..<100 { urls.append("https://bench.offlinepkg.test/app/route-\(number)") }
// The same order in every process and build: two builds compared side by side walk the same URLs.
var generator = SeededGenerator(seed: 0x6f66_666c_696e_6570)
urls.shuffle(using: &generator)
var hits = 0
for url in urls where store.resolve(url) != nil { hits += 1 }
guard hits > urls.count / 2 else { fatalError("benchmark set up wrong: only \(hits) of \(urls.count) URLs hit") }

func measure(_ urls: [String], _ body: (String) -> Bool) -> (median: Double, all: [Double]) {
    var results = [Double]()
    for _ in 0..<runs {
        var found = 0
        let start = DispatchTime.now().uptimeNanoseconds
        var index = 0
        for _ in 0..<operationsPerRun {
            if body(urls[index]) { found += 1 }
            index += 1
            if index == urls.count { index = 0 }
        }
        let elapsed = DispatchTime.now().uptimeNanoseconds - start
        precondition(found > 0)
        results.append(Double(elapsed) / Double(operationsPerRun))
    }
    let sorted = results.sorted()
    return (sorted[sorted.count / 2], results)
}

let resolve = measure(urls) { store.resolve($0) != nil }
print(
    "files: \(store.activeSet.packages.count) packages, \(fileCount) files; urls: \(urls.count) (\(hits) hits); "
        + "\(operationsPerRun) operations per run; set-up \(reused ? "reused" : "made")")
print(
    String(
        format: "resolve(String): median %.1f ns/op  runs: %@", resolve.median,
        resolve.all.map { String(format: "%.1f", $0) }.joined(separator: " ")))
// Where the time goes: the loop and string access alone, then normalising without the table lookup.
// BENCH_BREAKDOWN=0 leaves them out (scripts/bench-resolve-instructions counts resolve's alone).
if ProcessInfo.processInfo.environment["BENCH_BREAKDOWN"] != "0" {
    let loop = measure(urls) { $0.utf8.count > 8 }
    let normalize = measure(urls) { LookupURL.keyLength($0) != nil }
    print(String(format: "  of which: loop and string access %.1f ns, normalising the URL %.1f ns", loop.median, normalize.median))
}
// A global is never deinitialised at exit: the scratch root goes now, not into /tmp for good.
scratch?.remove()
