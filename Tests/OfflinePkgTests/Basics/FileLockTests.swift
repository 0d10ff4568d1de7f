import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// The root's lock (`FileLock`): released when its value goes, even while another descriptor of the
/// same open file lives on, as a child's copy does between its start and its exec.
@Suite struct FileLockTests {
    @Test func aLockIsReleasedThoughACopyOfItsDescriptorLivesOn() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("lock")
        var lock = try FileLock(path: path, wait: false)
        #expect(lock != nil)
        let copy = try #require(Self.copyOfDescriptor(openOn: path), "no descriptor of \(path) in /proc/self/fd")
        defer { close(copy) }
        lock = nil
        #expect(try FileLock(path: path, wait: false) != nil, "the copy of the released lock's descriptor still holds it")
    }

    @Test func aLockHeldElsewhereIsNil() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("lock")
        let held = try #require(try FileLock(path: path, wait: false))
        #expect(try FileLock(path: path, wait: false) == nil)
        withExtendedLifetime(held) {}
    }

    /// A `dup` of the descriptor this process has open on `path`: the same open file, as a child's copy.
    private static func copyOfDescriptor(openOn path: String) -> Int32? {
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return nil }
        for name in names {
            guard let fd = Int32(name),
                let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
                URL(fileURLWithPath: link).resolvingSymlinksInPath().path == target
            else { continue }
            let copy = dup(fd)
            return copy >= 0 ? copy : nil
        }
        return nil
    }
}
