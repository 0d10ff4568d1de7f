import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// docs/protocol.md#neighbours-on-the-device, temporary files created O_EXCL|O_NOFOLLOW: a symlink planted where offlinepkg will
/// write a temporary (its name is the target's plus the writer's pid, which anyone can guess) must
/// never make it write through the link. Each writer of secrets or state is tried with a link at
/// its own temporary name, this process's pid.
@Suite struct PlantedLinkTests {
    /// A victim file the link points at, and a check that it is untouched.
    struct Victim {
        let scratch: TemporaryDirectory
        var path: String { scratch.path("victim") }

        init() throws {
            scratch = try TemporaryDirectory()
            try scratch.write("precious\n", to: "victim")
        }

        func plant(at path: String) {
            #expect(symlink(self.path, path) == 0, "symlink \(path): \(errno)")
        }

        var isUntouched: Bool { (try? String(contentsOfFile: path, encoding: .utf8)) == "precious\n" }
    }

    @Test func writeAtomicallyNeverWritesThroughALinkAtItsTemporary() throws {
        let victim = try Victim()
        let target = victim.scratch.path("state.json")
        victim.plant(at: target + ".tmp-\(getpid())")
        try FileSystem.writeAtomically(Array("{}".utf8), to: target)
        #expect(victim.isUntouched, "the state's temporary wrote through a planted link")
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "{}")
        var info = stat()
        #expect(lstat(target, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o077 == 0)
    }

    @Test func theTLSKeyIsNeverWrittenThroughALink() throws {
        let victim = try Victim()
        let layout = CacheLayout(root: victim.scratch.path("root"))
        try FileSystem.makeDirectories(layout.tls)
        victim.plant(at: layout.tlsKey + ".tmp-\(getpid())")
        let certificate = try LoopbackCertificate.prepare(
            layout: layout, for: ActiveSet(generation: 0, sequence: 0, activatedAt: Date(), packages: []))
        #expect(victim.isUntouched, "the key's temporary wrote through a planted link")
        var info = stat()
        #expect(lstat(layout.tlsKey, &info) == 0 && info.st_mode & S_IFMT == S_IFREG, "key.pem is not a plain file")
        #expect(certificate.keyPEM.contains("PRIVATE KEY"))
    }
}
