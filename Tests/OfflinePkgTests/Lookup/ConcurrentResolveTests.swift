import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Synchronization
import Testing

/// Readers never see a mix: while the active set flips between two releases, every answer names an
/// existing file whose bytes belong to the release the answer claims (docs/protocol.md#switching).
@Suite struct ConcurrentResolveTests {
    static let names = (0..<40).map { "f\($0).txt" }

    @Test func resolvesDuringSwitchesAnswerFromExactlyOneRelease() async throws {
        let scratch = try TemporaryDirectory()
        var sites = [String: String]()
        for release in ["A", "B"] {
            let site = scratch.path("site-\(release)")
            var files = [String: String]()
            for name in Self.names { files["dir/" + name] = "\(release):\(name)\n" }
            try writeSite(files, to: site)
            sites[release] = site
        }
        let repository = try RepositoryBuilder(directory: scratch.path("repo"))
        let root = URL(fileURLWithPath: scratch.path("root"))
        let writer = try PackageStore(root: root, options: .init(watchInterval: 0))
        // The readers use their own store that notices switches by polling, like another process.
        let reader = try PackageStore(root: root, options: .init(watchInterval: 0.02))
        func activate(_ sequence: Int) async throws {
            let release = sequence % 2 == 1 ? "A" : "B"
            try repository.publish(
                sequence: sequence,
                packages: [
                    .init(id: "app", version: release, routes: ["https://app.example.test/"], site: sites[release]!)
                ])
            let report = try await Updater(store: writer, manifestURL: repository.manifestURL).sync()
            #expect(report.outcome == .activated)
        }
        try await activate(1)
        try reader.reload()

        let stop = Atomic<Bool>(false)
        let failures = Mutex<[String]>([])
        let counts = Mutex<[String: Int]>([:])
        // Plain threads, not the cooperative pool: blocking two of its (two) threads for the whole
        // test stalled every other async test in the run.
        let finished = DispatchGroup()
        for worker in 0..<4 {
            finished.enter()
            Thread {
                defer { finished.leave() }
                var seen = [String: Int]()
                var round = 0
                while !stop.load(ordering: .relaxed) || round < 2_000 {
                    let name = Self.names[(round &* 7 &+ worker) % Self.names.count]
                    round += 1
                    guard let hit = reader.resolve("https://app.example.test/dir/\(name)?r=\(round)") else {
                        failures.withLock { $0.append("miss for \(name)") }
                        continue
                    }
                    seen[hit.version, default: 0] += 1
                    guard let bytes = FileManager.default.contents(atPath: hit.path) else {
                        failures.withLock { $0.append("\(hit.path) does not exist") }
                        continue
                    }
                    let text = String(decoding: bytes, as: UTF8.self)
                    if text != "\(hit.version):\(name)\n" {
                        failures.withLock { $0.append("\(hit.path) (version \(hit.version)) holds \(text)") }
                    }
                }
                counts.withLock { total in for (version, count) in seen { total[version, default: 0] += count } }
            }.start()
        }
        for sequence in 2...13 {
            try await activate(sequence)
            try await Task.sleep(nanoseconds: 60_000_000)
        }
        stop.store(true, ordering: .relaxed)
        await withCheckedContinuation { continuation in finished.notify(queue: .global()) { continuation.resume() } }

        let problems = failures.withLock { $0 }
        #expect(problems.isEmpty, "\(problems.count) bad answers, first: \(problems.prefix(5))")
        let seen = counts.withLock { $0 }
        // Both releases were actually served while the readers ran.
        #expect(seen["A", default: 0] > 0 && seen["B", default: 0] > 0, "\(seen)")
    }
}
