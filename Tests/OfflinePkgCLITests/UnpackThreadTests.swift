import Foundation
import OfflinePkgTestSupport
import Testing

/// A sync's unpack creates files on several threads (`WriterLanes`, issue 13): one big package no
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
}
