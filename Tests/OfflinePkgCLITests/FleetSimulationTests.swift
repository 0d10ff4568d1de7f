import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `scripts/fleet` in miniature (the full run is `make fleet`): it must run end to end and find no sync
/// that a stale edge broke.
@Suite("Fleet simulation")
struct FleetSimulationTests {
    @Test func aSmallFleetRunsThroughTheCachingEdgeWithoutStaleEdgeFailures() throws {
        let result = try run(
            PublishOperationsTests.checkout + "/scripts/fleet", [],
            environment: [
                "OFFLINEPKG": OfflinePkgBinary.path, "DEVICES": "12", "ROUNDS": "3", "JITTER": "0.2", "PARALLEL": "6", "MANIFEST_TTL": "1",
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            ], timeout: 240)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("total: 36 syncs, 0 non-zero, 0 caused by edge staleness"), "\(result.stdout)")
        #expect(result.stdout.contains("v2  rollout  30%:"), "\(result.stdout)")
    }
}
