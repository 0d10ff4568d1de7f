import Foundation
import OfflinePkg
import OfflinePkgTestSupport
import Testing

/// A sync writes each byte of a release to the disk once, and flushes once per sync rather than once
/// per package. Watched with strace: the order of system calls is deterministic where the kernel's
/// writeback counters (the `sync-writes` benchmark row measures those) depend on what else the machine does.
@Suite("Disk writes")
struct DiskWriteTests {
    @Test func downloadsAreDeletedBeforeTheOneFlushOfASync() async throws {
        let repo = try Self.repository(["home", "docs", "lib", "img"], dataBytes: 200_000)
        let root = try TemporaryDirectory()
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"], trace: "syncfs,unlink,unlinkat",
            timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        let calls = traced.calls
        let flushes = calls.indices.filter { calls[$0].contains("syncfs(") && !calls[$0].contains("resumed") }
        let deletedDownloads = calls.indices.filter { calls[$0].contains("/downloads/") && calls[$0].contains(".part\"") }
        // Four packages: one flush of the trees' data and one of their renames, not one per package.
        #expect(flushes.count == 2, "syncfs calls: \(flushes.map { calls[$0] })")
        #expect(deletedDownloads.count == 4, "\(deletedDownloads.map { calls[$0] })")
        // Each download is gone before the first flush, so its pages are dropped rather than written.
        if let firstFlush = flushes.first {
            #expect(deletedDownloads.allSatisfy { $0 < firstFlush })
        }
    }

    /// A one-package first install flushes its tree while the lanes still write it (the kernel's
    /// writeback beside the creates, not after them): the flush starts once the archive has been read,
    /// and only after the download is deleted, so the download's pages are still dropped, not written.
    /// The commit's two flushes follow, and the tree is whole.
    @Test func aFirstInstallOfOnePackageFlushesWhileItsFilesAreStillWritten() async throws {
        let repo = try TestRepository()
        // 2,000 files in 20 folders: the reader hands them over faster than two lanes create them.
        let files = (0..<2_000).map {
            SiteFile("assets/g\($0 / 100)/f\($0).js", "/* \($0) */ " + String(repeating: "x", count: $0 % 700))
        }
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")] + files)
        try repo.publish()
        let root = try TemporaryDirectory()
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"], trace: "syncfs,unlink,openat,close",
            flags: ["-y"], timeout: 120)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        let calls = traced.calls.filter { !$0.contains("resumed>") }
        let flushes = calls.indices.filter { calls[$0].contains("syncfs(") }
        let download = try #require(
            calls.firstIndex { $0.contains("unlink(") && $0.contains("/downloads/") && $0.contains(".part\"") },
            "the download was not deleted")
        // The unpacker let go of the archive first: an open, deleted file is written by a flush all the same.
        let closes = calls.indices.filter { calls[$0].contains("close(") && calls[$0].contains(".part>") }
        #expect(!closes.isEmpty && closes.allSatisfy { $0 < download }, "the download was still open when deleted")
        // A tree file is created relative to its folder's descriptor, never by a path from the root.
        let creates = calls.indices.filter {
            calls[$0].contains("openat(") && calls[$0].contains("O_CREAT") && calls[$0].contains(".js\"")
        }
        #expect(creates.count == 2_000, "tree files created: \(creates.count)")
        // One flush beside the lanes, then the commit's flush of the trees and the one of the renames.
        #expect(flushes.count == 3, "syncfs calls: \(flushes.map { calls[$0] })")
        let early = try #require(flushes.first)
        #expect(download < early, "the download was deleted after the first flush began")
        #expect(early < creates.last!, "the first flush began only after the last file was created")
        try await InProcessCLI.run(["verify", "--root", root.path("root")]).checked("verify")
    }

    /// A first install writes a file that the tree repeats once, although its flush starts while the
    /// lanes still write: each repeat is linked to the first copy as soon as it is written, before that
    /// flush can write it, not at staging. Counted as the `sync-writes` benchmark row counts: pages dirtied less
    /// those dropped before writeback (`/proc/PID/io` of a shell around the sync).
    @Test func aFirstInstallWritesARepeatedFileOnce() async throws {
        let repo = try TestRepository()
        let copy = try CrashSafetyTests.randomBytes(1 << 20)
        // Eight copies first, then 12 MiB of other bytes, all in one folder and so one lane, which writes
        // in the archive's order: the copies are written while the reader still hands over the rest (a
        // lane holds at most 4 MiB), so every one is whole and dirty when the early flush starts.
        let copies = (0..<8).map { SiteFile("d/a\($0)-copy.bin", bytes: copy) }
        let rest = try (0..<12).map { n in SiteFile("d/rest-\(n).bin", bytes: try CrashSafetyTests.randomBytes(1 << 20)) }
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")] + copies + rest)
        try repo.publish()
        // The counters count what goes to a disk: tmpfs, which /tmp is on some systems, writes nothing back.
        // The build folder is where the tests' binary is, on a disk as the checkout is.
        let build = (OfflinePkgBinary.path as NSString).deletingLastPathComponent
        let fileSystem = try run("stat", ["-f", "-c", "%T", build]).checked("stat -f").stdout
        try #require(
            !fileSystem.hasPrefix("tmpfs"),
            "\(build) is on tmpfs, which writes nothing back to count: run the tests from a checkout on a disk")
        let root = try TemporaryDirectory(prefix: "offlinepkg-writes", in: build)
        let counted = try run(
            "/bin/sh",
            [
                "-c",
                #""$0" "$@" >/dev/null || exit 1; awk '/^write_bytes/ {w=$2} /^cancelled_write_bytes/ {c=$2} END {print w-c}' /proc/$$/io"#,
                OfflinePkgBinary.path, "sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet",
            ], timeout: 120
        ).checked("sync")
        let written = try #require(Int(counted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(counted.stdout)")
        // The tree's own 13 MiB are counted (the counters see this file system)...
        #expect(written > 13 << 20, "written: \(written)")
        // ...and little more: not the download (20 MiB), not the seven repeats (7 MiB). The slack is for
        // the records (a few hundred KiB) and for pages the kernel may write back on its own meanwhile
        // (once in a dozen runs, about 1 MiB more).
        #expect(written < (13 << 20) + (2 << 20), "written: \(written) bytes")
        try await InProcessCLI.run(["verify", "--root", root.path("root")]).checked("verify")
    }

    /// An update's unchanged file (here a 200 KB `data.bin`) is switched to the held inode as it is
    /// unpacked, before the sync's first flush, so the copy just written is dropped before it is written
    /// back: an update that changes 1 % of a tree writes about 1 % to the disk, not the whole tree.
    @Test func anUpdatesUnchangedFilesAreLinkedToHeldContentBeforeTheFlush() async throws {
        let repo = try Self.repository(["home"], dataBytes: 200_000)
        let root = try TemporaryDirectory()
        try await InProcessCLI.run(["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"]).checked(
            "sync 1")
        try repo.add(
            "home", "2", routes: ["https://m.example.com/"],
            files: [SiteFile("index.html", "home 2"), SiteFile("data.bin", bytes: Array(repeating: UInt8(4), count: 200_000))])
        try repo.publish()
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"],
            trace: "syncfs,rename,renameat,renameat2",
            timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        let calls = traced.calls
        let firstFlush = try #require(calls.firstIndex { $0.contains("syncfs(") }, "no syncfs: \(calls)")
        // An update into a store that holds content flushes only at the commit, after its relinks.
        #expect(calls.filter { $0.contains("syncfs(") && !$0.contains("resumed") }.count == 2, "\(calls)")
        let relinked = calls.indices.filter { calls[$0].contains("/content/.tmp/") && calls[$0].contains("\"data.bin\"") }
        #expect(relinked.count == 1, "\(calls)")
        #expect(relinked.allSatisfy { $0 < firstFlush }, "the unchanged file was relinked after the flush: \(calls)")
        #expect(
            try await InProcessCLI.run(["lookup", "https://m.example.com/data.bin", "--root", root.path("root")]).checked(
                "lookup"
            )
            .status == 0)
    }

    /// A file whose bytes the sync has already taken into content/ (the same licence in two packages) is
    /// made a link to them before anything is written: it is never created, written, and then swapped
    /// for the link, which cost a dozen calls and, on ext4, a freed inode that every later create of the
    /// sync had to step over.
    @Test func aFileThatRepeatsHeldContentIsLinkedNotWritten() async throws {
        let licence = try CrashSafetyTests.randomBytes(5_000)
        let repo = try TestRepository()
        for id in ["home", "docs"] {
            try repo.add(
                id, "1", routes: ["https://m.example.com/\(id == "home" ? "" : id + "/")"],
                files: [SiteFile("index.html", "\(id) 1"), SiteFile("doc/copyright", bytes: licence)])
        }
        try repo.publish()
        let root = try TemporaryDirectory()
        // One package after the other, so the first has taken the licence in before the second unpacks.
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--jobs", "1", "--quiet"],
            trace: "openat,linkat,renameat,renameat2", timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        let created = traced.calls(containing: "\"copyright\", O_WRONLY|O_CREAT")
        #expect(created.count == 1, "copyright created \(created.count) times: \(created)")
        let swapped = traced.calls(containing: "/content/.tmp/").filter { $0.contains("rename") }
        #expect(swapped.isEmpty, "a written copy was swapped for a link: \(swapped)")
        try await InProcessCLI.run(["verify", "--root", root.path("root")]).checked("verify")
        let answer = try await InProcessCLI.run([
            "lookup", "https://m.example.com/docs/doc/copyright", "--root", root.path("root"),
        ])
        #expect(answer.status == 0, "\(answer.stderr)")
    }

    /// In a one-package first install, a file that repeats an earlier file of the tree (here in the same
    /// folder, so the same lane writes both, in order) is linked to it and never created.
    @Test func aFileThatRepeatsAnEarlierFileOfTheTreeIsLinkedNotWritten() async throws {
        let bytes = try CrashSafetyTests.randomBytes(5_000)
        let repo = try TestRepository()
        try repo.add(
            "home", "1", routes: ["https://m.example.com/"],
            files: [SiteFile("index.html", "home 1"), SiteFile("d/a.bin", bytes: bytes), SiteFile("d/b.bin", bytes: bytes)])
        try repo.publish()
        let root = try TemporaryDirectory()
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root.path("root"), "--quiet"],
            trace: "openat,linkat,renameat,renameat2",
            timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        #expect(traced.calls(containing: "\"a.bin\", O_WRONLY|O_CREAT").count == 1, "\(traced.calls)")
        #expect(traced.calls(containing: "\"b.bin\", O_WRONLY|O_CREAT").isEmpty, "\(traced.calls(containing: "b.bin"))")
        try await InProcessCLI.run(["verify", "--root", root.path("root")]).checked("verify")
    }

    /// A timer's sync that the server answers 304 changes only times in state.json: it writes them
    /// without a flush, so a sync every few minutes costs a device's disk no fsync at all.
    @Test func aNotModifiedSyncFlushesNothing() async throws {
        let repo = try Self.repository(["home"], dataBytes: 1_000)
        let nginx = try NginxServer(documentRoot: repo.path)
        let root = try TemporaryDirectory()
        let arguments = ["sync", nginx.url("manifest.json").absoluteString, "--root", root.path("root")]
        try await InProcessCLI.run(arguments + ["--quiet"]).checked("sync 1")
        // The second run takes in the content the first one left pending (a ledger session, flushed).
        try await InProcessCLI.run(arguments + ["--quiet"]).checked("sync 2")
        let traced = try Strace.offlinepkg(
            arguments, trace: "fsync,fdatasync,syncfs,sync_file_range,rename,renameat,renameat2", flags: ["-y"], timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        #expect((traced.result.stdout + traced.result.stderr).contains("not modified"), "not a 304: \(traced.result.stdout)")
        let calls = traced.calls.filter { !$0.contains("resumed") }
        #expect(calls.filter { $0.contains("sync") } == [], "\(calls)")
        // The check was noted all the same: state.json was replaced.
        #expect(calls.contains { $0.contains("rename") && $0.contains("/state.json\"") }, "\(calls)")
    }

    /// A download is written once: a new `.part` is not truncated (on ext4 a truncate to 0 has the file
    /// written out at its close, before the sync deletes it: 2.00x the script's bytes in
    /// the `sync-writes` benchmark row), and nothing under `downloads/` is flushed (the resume point is a hint: its
    /// fsync and its folder's were two per package, 2,012 for a 1,000-package manifest).
    @Test func aColdSyncNeitherTruncatesNorFlushesItsDownloads() async throws {
        let repo = try Self.repository(["home", "docs", "lib"], dataBytes: 100_000)
        let scratch = try TemporaryDirectory()
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", scratch.path("root"), "--quiet"],
            trace: "fsync,fdatasync,ftruncate,openat", flags: ["-y"], timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        // The downloads were made (a test that saw none would prove nothing)...
        #expect(traced.calls(containing: "openat(").filter { $0.contains("/downloads/") && $0.contains(".part\"") }.count >= 3)
        // ...and none of them, nor their resume points or their folder, was cut or flushed.
        #expect(traced.calls(containing: "ftruncate(").filter { $0.contains("/downloads/") } == [])
        let flushes = traced.calls(containing: "sync(").filter { $0.contains("fsync(") || $0.contains("fdatasync(") }
        #expect(!flushes.isEmpty, "the switch's fsyncs were not seen: the trace is not what this test expects")
        #expect(flushes.filter { $0.contains("/downloads") } == [], "\(flushes)")
    }

    /// docs/protocol.md#switching: the active set is switched by write, fsync, rename, fsync the folder. Without the last
    /// step a power loss can undo the rename while the sync already reported the switch. strace's `-y`
    /// names the file behind each descriptor, so the folder's fsync can be told from any other.
    @Test func theActiveSetsRenameIsFlushedByAnFsyncOfTheRootFolder() async throws {
        let repo = try TestRepository()
        try repo.add("home", "1", routes: ["https://m.example.com/"], files: [SiteFile("index.html", "home 1")])
        try repo.publish()
        let scratch = try TemporaryDirectory()
        _ = try scratch.makeDirectory("root")
        // strace prints the kernel's path of a descriptor: the folder's real path.
        let root = URL(fileURLWithPath: scratch.path("root")).resolvingSymlinksInPath().path
        let traced = try Strace.offlinepkg(
            ["sync", "file://" + repo.manifestPath, "--root", root, "--quiet"],
            trace: "rename,renameat,renameat2,fsync,fdatasync",
            flags: ["-y"], timeout: 60)
        #expect(traced.result.status == 0, "\(traced.result.stderr)")
        let calls = traced.calls
        let active = root + "/active.json"
        let renamed = try #require(
            calls.lastIndex { $0.contains("rename") && $0.contains("\"\(active)\"") && !$0.contains("resumed") },
            "no rename onto \(active): \(calls)")
        // The new record's bytes were flushed before the rename...
        let temporary = calls[renamed].firstMatch(of: /"([^"]*active\.json\.tmp-[0-9]+)"/).map { String($0.output.1) }
        #expect(
            temporary.map { name in calls[..<renamed].contains { $0.contains("fsync(") && $0.contains("<\(name)>") } } == true,
            "no fsync of the new active.json before its rename: \(calls[..<renamed])")
        // ...and the rename itself by an fsync of the folder that holds active.json.
        #expect(
            calls[(renamed + 1)...].contains { $0.contains("fsync(") && $0.contains("<\(root)>") },
            "no fsync of \(root) after the rename of active.json: \(calls[(renamed + 1)...])")
    }

    /// A published repository of one package per id, each a page and a `data.bin` of `dataBytes`.
    private static func repository(_ ids: [String], dataBytes: Int) throws -> TestRepository {
        let repo = try TestRepository()
        for id in ids {
            try repo.add(
                id, "1", routes: ["https://m.example.com/\(id == "home" ? "" : id + "/")"],
                files: [
                    SiteFile("index.html", "\(id) 1"),
                    SiteFile("data.bin", bytes: Array(repeating: UInt8(id.count), count: dataBytes)),
                ])
        }
        try repo.publish()
        return repo
    }
}
