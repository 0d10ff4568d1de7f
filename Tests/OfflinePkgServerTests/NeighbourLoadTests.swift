import Foundation
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#neighbours-on-the-device, bounded: a page cannot make the device run any number of upstream transfers at once,
/// nor fill its disk with an answer that will not be kept.
@Suite(.enabled(if: LocalUser.available, "needs root to run serve as an unprivileged user"))
struct NeighbourLoadTests {
    @Test func seventeenSlowRequestsAtOnceRunSixteenTransfers() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        let urls = (1...17).map { rig.serve!.url.absoluteString + "slow/\($0)" }
        let result = try LocalUser.shell.run(
            [
                "/usr/bin/curl", "-sS", "--max-time", "30", "--parallel", "--parallel-immediate", "--parallel-max", "17",
                "-H", "Host: \(rig.apiHost)", "-w", "%{http_code} %{size_download}\\n",
            ] + urls.flatMap { ["-o", "/dev/null", $0] }, timeout: 60)
        let lines = result.stdout.split(separator: "\n")
        #expect(
            lines.count == 17 && lines.allSatisfy { $0 == "200 \(NeighbourRig.slowSize)" }, "\(result.stdout) \(result.stderr)")
        // The most transfers the upstream saw at once: each request's span is [end - duration, end].
        let spans = rig.received("/slow/", count: 17).map { ($0.end - $0.duration, $0.end) }
        #expect(spans.count == 17)
        let most = spans.map { span in spans.filter { $0.0 <= span.0 && $0.1 > span.0 + 0.01 }.count }.max() ?? 0
        #expect(most == 16, "the upstream served \(most) at once: \(spans.map { String(format: "%.3f-%.3f", $0.0, $0.1) })")
    }

    @Test func anUnstoredHundredMegabyteAnswerNeverLandsOnDiskWhole() throws {
        let rig = try NeighbourRig()
        try rig.startServe()
        let client = try LocalUser.shell.start([
            "/usr/bin/curl", "-sS", "--max-time", "60", "--limit-rate", "40M", "-H", "Host: \(rig.apiHost)", "-o", "/dev/null",
            "-w", "%{http_code} %{size_download}", rig.serve!.url.absoluteString + "big/data.bin",
        ])
        // The largest the runtime cache's temporary files got while the answer went through.
        var most: Int64 = 0
        let deadline = Date().addingTimeInterval(60)
        while client.isRunning && Date() < deadline {
            let folder = rig.root + "/runtime/tmp"
            let sizes = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).map { name -> Int64 in
                var info = stat()
                return lstat(folder + "/" + name, &info) == 0 ? Int64(info.st_size) : 0
            }
            most = max(most, sizes.reduce(0, +))
            usleep(10_000)
        }
        let result = client.wait()
        #expect(result.stdout == "200 \(NeighbourRig.bigSize)", "\(result.stdout) \(result.stderr)")
        #expect(most < 8 << 20, "runtime/tmp held \(most) bytes of a \(NeighbourRig.bigSize)-byte answer")
        #expect(try rig.counters()["misses"] as? Int == 1)
    }
}
