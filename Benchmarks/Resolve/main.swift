// `PackageStore.resolve` timed in process: the root and the URLs are made by Benchmarks/rows/resolve.py
// (a site published and synced with the CLI, a fixed mix of hits and misses in a fixed order), so two
// builds of this program measure the very same work and differ only in the library.
//
//     ResolveBenchmark ROOT URL-FILE [RUNS] [OPERATIONS]
//
// Prints one JSON object: the median ns per resolve over RUNS runs of OPERATIONS resolves, and each run's.
// Uses only the library's public API, so it builds against any revision that has `resolve(_: String)`.
import Foundation
import OfflinePkg

let arguments = CommandLine.arguments
guard arguments.count >= 3, let text = try? String(contentsOfFile: arguments[2], encoding: .utf8) else {
    FileHandle.standardError.write(Data("usage: ResolveBenchmark ROOT URL-FILE [RUNS] [OPERATIONS]\n".utf8))
    exit(2)
}
let runs = arguments.count > 3 ? Int(arguments[3]) ?? 9 : 9
let operations = arguments.count > 4 ? Int(arguments[4]) ?? 400_000 : 400_000
let urls = text.split(separator: "\n").map(String.init)
let store = try PackageStore(root: URL(fileURLWithPath: arguments[1]), options: .init(watchInterval: 0))
let hits = urls.filter { store.resolve($0) != nil }.count
guard !urls.isEmpty, hits > urls.count / 2 else {
    FileHandle.standardError.write(Data("set up wrong: \(hits) of \(urls.count) URLs hit\n".utf8))
    exit(1)
}

var perRun = [Double]()
for _ in 0..<runs {
    var found = 0
    var index = 0
    let start = DispatchTime.now().uptimeNanoseconds
    for _ in 0..<operations {
        if store.resolve(urls[index]) != nil { found += 1 }
        index += 1
        if index == urls.count { index = 0 }
    }
    let elapsed = DispatchTime.now().uptimeNanoseconds - start
    precondition(found > 0)
    perRun.append(Double(elapsed) / Double(operations))
}
let median = perRun.sorted()[perRun.count / 2]
print(#"{"medianNs": \#(median), "runsNs": [\#(perRun.map { String($0) }.joined(separator: ", "))], "urls": \#(urls.count), "hits": \#(hits)}"#)
