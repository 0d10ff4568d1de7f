import Foundation
import OfflinePkgTestSupport
import Testing

/// A sync's unpack creates files on several threads (`WriterLanes`): one big package no
/// longer unpacks on one core.
@Suite("Unpack threads")
struct UnpackThreadTests {
    /// Files are created on more than one thread, watched with strace as `sync` runs.
    @Test func filesAreCreatedOnSeveralThreads() throws {
        let repo = try TestRepository()
        var files = [SiteFile("index.html", "home")]
        for folder in 0..<40 {
            for n in 0..<5 { files.append(SiteFile("d\(folder)/f\(n).js", "\(folder) \(n)")) }
        }
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: files)
        try repo.publish()
        let root = try TemporaryDirectory()
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"], trace: "openat", timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        // `N openat(fd, "f0.js", O_WRONLY|O_CREAT|O_EXCL...`: the thread that created each tree file.
        let creators = Set(
            traced.calls(containing: ".js\"").filter { $0.contains("O_CREAT|O_EXCL") }.compactMap { $0.split(separator: " ").first })
        #expect(creators.count >= 2, "threads that created the tree's files: \(creators.sorted())")
    }

    /// A tree file is created 0400 (read-only, its user's alone: docs/protocol.md#neighbours-on-the-device) in its `openat`, with no
    /// `fchmod` after, under the usual umasks and under one that keeps everything private.
    @Test(arguments: ["022", "077"])
    func treeFilesAreBornReadOnly(umask: String) throws {
        let strace = try #require(which("strace"), "strace is needed (make deps installs it)")
        let repo = try TestRepository()
        try repo.add(
            "home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home"), SiteFile("a/b.js", "b")])
        try repo.publish()
        let root = try TemporaryDirectory()
        let result = try run(
            "sh",
            ["-c", "umask \(umask) && exec \"$0\" \"$@\"", strace, "-f", "-qq", "-e", "trace=openat,fchmod",
             OfflinePkgBinary.path, "sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"],
            timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stderr.split(separator: "\n")
        let created = lines.filter { $0.contains("\"b.js\"") && $0.contains("O_CREAT|O_EXCL") }
        #expect(created.count == 1, "\(lines)")
        let chmods = lines.filter { $0.contains("fchmod(") }
        #expect(created.allSatisfy { $0.contains("O_CLOEXEC, 0400") }, "\(created)")
        #expect(chmods.isEmpty, "\(chmods)")
        let tree = try #require(
            try FileManager.default.contentsOfDirectory(atPath: root.path("root/trees/home")).first { !$0.contains(".") })
        for file in ["index.html", "a/b.js"] {
            let path = root.path("root/trees/home/\(tree)/\(file)")
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]
            #expect(mode as? Int == 0o400, "\(file)")
        }
    }
}
