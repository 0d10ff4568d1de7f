import Foundation
import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// Publish → sync round trips: the device follows v1 → v2 → v3 over deltas, and falls back to the full
/// archive whenever a delta cannot be trusted.
@Suite struct DeltaSyncTests {
    @Test(arguments: ArchiveFormat.allCases)
    func deviceFollowsThreeVersionsOverDeltas(format: ArchiveFormat) async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-sync")
        let repo = scratch.path("repo")
        let root = scratch.path("root")
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        var previousTree: (version: String, tree: String)?

        for version in 1...3 {
            let site = scratch.path("site-v\(version)")
            try writeSite(DemoSite.files(version: version), to: site)
            let published = try publisher.publish(DemoSite.request(site: site, version: version, format: format))
            #expect(published.tree == (try treeHash(of: site)))
            #expect(published.deltas.map(\.from) == ["2.0", "1.0"].suffix(version - 1))

            let report = try await syncDevice(root: root, repo: repo)
            let change = try #require(report.changes.first { $0.id == "app" })
            if let previous = previousTree {
                let delta = try #require(published.deltas.first { $0.from == previous.version })
                #expect(change.via == .delta)
                #expect(report.bytesFetched == delta.file.size)
                #expect(delta.file.size < published.archive.size)
                // An unchanged file is the old tree's inode, not a copy.
                let old = installedTree(root: root, id: "app", version: previous.version, tree: previous.tree)
                let new = installedTree(root: root, id: "app", version: published.version, tree: published.tree)
                #expect(inode(old + "/img/photo-0.jpg") == inode(new + "/img/photo-0.jpg"))
                #expect(inode(old + "/index.html") != nil)
            } else {
                #expect(change.via == .archive)
                #expect(report.bytesFetched == published.archive.size)
            }
            let tree = installedTree(root: root, id: "app", version: published.version, tree: published.tree)
            #expect(sameFiles(site, tree))
            #expect(try treeHash(of: tree) == published.tree)
            // Installed trees are read-only, whether unpacked from an archive or assembled from a delta.
            #expect(notReadOnly(tree).isEmpty)
            previousTree = (published.version, published.tree)
        }
        // Nothing left behind in staging or downloads.
        #expect(FileSystem.contents(of: CacheLayout(root: root).staging).isEmpty)
        #expect(FileSystem.contents(of: CacheLayout(root: root).downloads).isEmpty)
    }

    /// Paths under `tree` (itself included) that are not 0400 files or 0500 folders.
    private func notReadOnly(_ tree: String) -> [String] {
        var info = stat()
        guard lstat(tree, &info) == 0 else { return [tree + " (missing)"] }
        let isFolder = (info.st_mode & S_IFMT) == S_IFDIR
        var wrong = info.st_mode & 0o7777 == (isFolder ? 0o500 : 0o400) ? [] : [tree]
        if isFolder { for name in FileSystem.contents(of: tree) { wrong += notReadOnly(tree + "/" + name) } }
        return wrong
    }

    /// Publishes v1, syncs the device to it, publishes v2; returns what the tests need to tamper with v2.
    private func deviceOnV1WithV2Published(_ scratch: TemporaryDirectory) async throws -> (
        repo: String, root: String, v1: PublishReport, v2: PublishReport
    ) {
        let repo = scratch.path("repo")
        let root = scratch.path("root")
        let publisher = Publisher(repository: URL(fileURLWithPath: repo))
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site-v1"))
        try writeSite(DemoSite.files(version: 2), to: scratch.path("site-v2"))
        let v1 = try publisher.publish(DemoSite.request(site: scratch.path("site-v1"), version: 1))
        _ = try await syncDevice(root: root, repo: repo)
        let v2 = try publisher.publish(DemoSite.request(site: scratch.path("site-v2"), version: 2))
        return (repo, root, v1, v2)
    }

    @Test func corruptDeltaFailsItsHashAndFallsBackToTheFullArchive() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-corrupt")
        let (repo, root, v1, v2) = try await deviceOnV1WithV2Published(scratch)
        let delta = try #require(v2.deltas.first)
        // Flip one byte in the middle; the manifest still promises the original hash.
        let path = repo + "/" + delta.file.url
        var bytes = try FileSystem.read(path)
        bytes[bytes.count / 2] ^= 0xff
        try FileSystem.writeAtomically(bytes, to: path)

        let events = EventLog()
        let report = try await syncDevice(root: root, repo: repo, events: events)
        #expect(report.outcome == .activated)
        #expect(report.changes.first?.via == .archive)
        #expect(report.bytesFetched == delta.file.size + v2.archive.size)
        guard case .hashMismatch = try #require(events.deltaFailures.first) else {
            Issue.record("expected a hash mismatch, got \(events.deltaFailures)")
            return
        }
        #expect(sameFiles(scratch.path("site-v2"), installedTree(root: root, id: "app", version: "2.0", tree: v2.tree)))
        #expect(sameFiles(scratch.path("site-v1"), installedTree(root: root, id: "app", version: "1.0", tree: v1.tree)))
        #expect(FileSystem.contents(of: CacheLayout(root: root).staging).isEmpty)
    }

    @Test func deltaWithCorrectHashButWrongContentFallsBackAndLeavesTheOldTreeIntact() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-wrong-tree")
        let (repo, root, v1, v2) = try await deviceOnV1WithV2Published(scratch)
        // A well-formed delta whose content is wrong: it rewrites a file the old tree shares by hard link
        // (which must not write through to v1) and forgets the other changes.
        let stage = scratch.path("evil")
        try writeSite(["img/photo-0.jpg": Array("not the photo".utf8)], to: stage)
        try FileSystem.writeAtomically(
            Array(#"{"from":"1.0","to":"2.0","delete":["robots.txt"]}"#.utf8), to: stage + "/.offlinepkg-delta.json")
        let evil = repo + "/archives/evil.delta.tar.gz"
        try shell("bsdtar -czf '\(evil)' -C '\(stage)' .")
        try rewriteDelta(in: repo, to: "archives/evil.delta.tar.gz", file: evil)

        let events = EventLog()
        let report = try await syncDevice(root: root, repo: repo, events: events)
        #expect(report.outcome == .activated)
        #expect(report.changes.first?.via == .archive)
        #expect(report.bytesFetched == Int64(FileSystem.fileSize(evil)!) + v2.archive.size)
        guard case .treeMismatch = try #require(events.deltaFailures.first) else {
            Issue.record("expected a tree mismatch, got \(events.deltaFailures)")
            return
        }
        let oldTree = installedTree(root: root, id: "app", version: "1.0", tree: v1.tree)
        #expect(sameFiles(scratch.path("site-v1"), oldTree))
        #expect(try treeHash(of: oldTree) == v1.tree)
        #expect(sameFiles(scratch.path("site-v2"), installedTree(root: root, id: "app", version: "2.0", tree: v2.tree)))
        #expect(FileSystem.contents(of: CacheLayout(root: root).staging).isEmpty)
        // The delta's wrong photo was taken into content/ before its tree failed: the same sync's close
        // collects it, and counts only what the installed trees link.
        let store = ContentStore(layout: CacheLayout(root: root))
        var orphans = [String]()
        store.heldFiles { path, _, info in if info.st_nlink == 1 { orphans.append(path) } }
        #expect(orphans.isEmpty, "held content no tree links: \(orphans)")
        #expect(!store.contains(sha256: SHA256.hash(Array("not the photo".utf8)).hex))
        let walked = store.walkedUsage()
        let figure = try #require(store.ledger.closedFigure(), "the sync left the content figure open")
        #expect(figure.files == walked.files && figure.bytes == walked.bytes, "figure \(figure), walk \(walked)")
    }

    @Test func aDamagedBaseTreeIsNotPassedOnByADelta() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-damaged-base")
        let (repo, root, v1, v2) = try await deviceOnV1WithV2Published(scratch)
        // Damage a file of v1 that v2 keeps unchanged.
        let oldTree = installedTree(root: root, id: "app", version: "1.0", tree: v1.tree)
        let shared = "pages/page-0.html"
        chmod(oldTree + "/" + shared, 0o644)
        try FileSystem.writeAtomically(Array("damaged".utf8), to: oldTree + "/" + shared)
        let events = EventLog()
        let report = try await syncDevice(root: root, repo: repo, events: events)
        #expect(report.outcome == .activated && report.changes.first?.via == .archive)
        guard case .corruptState = try #require(events.deltaFailures.first) else {
            Issue.record("expected the damaged base to be found, got \(events.deltaFailures)")
            return
        }
        #expect(try treeHash(of: installedTree(root: root, id: "app", version: "2.0", tree: v2.tree)) == v2.tree)
    }

    @Test(arguments: [
        (#"{"from":"1.0","to":"2.0","delete":["../outside.txt"]}"#, "\"..\" segment"),
        (#"{"from":"1.0","to":"2.0","delete":["/etc/passwd"]}"#, "absolute path"),
        (#"{"from":"1.0","to":"2.0","delete":["not/in/v1.txt"]}"#, "not a file of 1.0"),
        (#"{"from":"0.9","to":"2.0","delete":[]}"#, "expected 1.0 into 2.0"),
    ])
    func hostileDeltaControlIsRefusedAndFallsBack(control: String, reason: String) async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-hostile")
        let (repo, root, _, v2) = try await deviceOnV1WithV2Published(scratch)
        try FileSystem.writeAtomically(Array("keep me\n".utf8), to: root + "/outside.txt")
        let stage = scratch.path("hostile")
        try writeSite([".offlinepkg-delta.json": Array(control.utf8)], to: stage)
        let hostile = repo + "/archives/hostile.delta.tar"
        try shell("bsdtar -cf '\(hostile)' -C '\(stage)' .")
        try rewriteDelta(in: repo, to: "archives/hostile.delta.tar", file: hostile)

        let events = EventLog()
        let report = try await syncDevice(root: root, repo: repo, events: events)
        #expect(report.changes.first?.via == .archive)
        let failure = try #require(events.deltaFailures.first)
        #expect("\(failure)".contains(reason))
        #expect(FileSystem.exists(root + "/outside.txt"))
        #expect(sameFiles(scratch.path("site-v2"), installedTree(root: root, id: "app", version: "2.0", tree: v2.tree)))
    }

    @Test func handMadeRepositoryWithBsdtarAndSha256sumSyncs() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-handmade")
        try writeSite(DemoSite.files(version: 1), to: scratch.path("site-v1"))
        try writeSite(DemoSite.files(version: 2), to: scratch.path("site-v2"))
        let repo = scratch.path("repo")
        let root = scratch.path("root")
        // The way an outside publisher would do it (compare Fixtures/make-demo-repo.sh): stock tools only,
        // `./`-prefixed members, a delta in another compression than the full archive.
        let script = #"""
            repo=$1 s1=$2 s2=$3
            mkdir -p "$repo/archives" "$repo/delta"
            tree() { (cd "$1" && \#(coreutilsTreeHashPipeline) | cut -d' ' -f1); }
            bsdtar --options gzip:!timestamp -czf "$repo/archives/app-1.tar.gz" -C "$s1" .
            bsdtar -czf "$repo/archives/app-2.tar.gz" -C "$s2" .
            (cd "$s2" && cp --parents index.html js/lib/module-3.js fonts/sans.woff2 "$repo/delta/")
            printf '{"from": "1", "to": "2", "delete": ["robots.txt"]}' > "$repo/delta/.offlinepkg-delta.json"
            bsdtar -cJf "$repo/archives/app-1-2.delta.tar.xz" -C "$repo/delta" .
            sha() { sha256sum "$1" | cut -d' ' -f1; }
            size() { stat -c %s "$1"; }
            entry() {  # version archive tree [delta-from delta-file]
              printf '{"id": "app", "version": "%s", "routes": ["https://m.example.com/app/"],' "$1"
              printf ' "archive": {"url": "%s", "sha256": "%s", "size": %s}, "tree": "%s"' "$2" "$(sha "$repo/$2")" "$(size "$repo/$2")" "$3"
              if [ $# -gt 3 ]; then
                printf ', "deltas": [{"from": "%s", "url": "%s", "sha256": "%s", "size": %s}]' "$4" "$5" "$(sha "$repo/$5")" "$(size "$repo/$5")"
              fi
              printf '}'
            }
            printf '{"format": 1, "sequence": 1, "packages": [%s]}' "$(entry 1 archives/app-1.tar.gz "$(tree "$s1")")" > "$repo/manifest.v1.json"
            printf '{"format": 1, "sequence": 2, "packages": [%s]}' "$(entry 2 archives/app-2.tar.gz "$(tree "$s2")" 1 archives/app-1-2.delta.tar.xz)" > "$repo/manifest.v2.json"
            size "$repo/archives/app-1-2.delta.tar.xz"
            """#
        let deltaSize = try shell(
            "cat > '\(scratch.path("make.sh"))' <<'EOF'\n\(script)\nEOF\nbash '\(scratch.path("make.sh"))' '\(repo)' '\(scratch.path("site-v1"))' '\(scratch.path("site-v2"))'"
        )

        try shell("cp '\(repo)/manifest.v1.json' '\(repo)/manifest.json'")
        let first = try await syncDevice(root: root, repo: repo)
        #expect(first.changes.first?.via == .archive)
        try shell("cp '\(repo)/manifest.v2.json' '\(repo)/manifest.json'")
        let events = EventLog()
        let second = try await syncDevice(root: root, repo: repo, events: events)
        #expect(events.deltaFailures.isEmpty)
        #expect(second.changes.first?.via == .delta)
        #expect(second.bytesFetched == Int64(deltaSize.trimmingCharacters(in: .whitespacesAndNewlines)))
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(watchInterval: 0))
        let active = try #require(store.activeSet.package("app"))
        #expect(sameFiles(scratch.path("site-v2"), installedTree(root: root, id: "app", version: "2", tree: active.tree)))
    }

    @Test func twoInstalledVersionsCostOneTreePlusTheChangedFiles() async throws {
        let scratch = try TemporaryDirectory(prefix: "offlinepkg-delta-du")
        let (_, root, _, _) = try await deviceOnV1WithV2Published(scratch)
        let trees = CacheLayout(root: root).trees
        let before = try shell("du -sk '\(trees)' | cut -f1")
        _ = try await syncDevice(root: root, repo: scratch.path("repo"))
        let after = try shell("du -sk '\(trees)' | cut -f1")
        let one = Int(before.trimmingCharacters(in: .whitespacesAndNewlines))!
        let two = Int(after.trimmingCharacters(in: .whitespacesAndNewlines))!
        // v2 changes two files and adds one: the second tree costs those three files, its folders and
        // its index, not a second copy of the ~40 files (du counts a hard-linked inode once).
        #expect(two - one < one / 3, "one tree: \(one) KiB, two trees: \(two) KiB")
    }

    /// Points v2's delta in the manifest at `file`, with its true hash and size.
    private func rewriteDelta(in repo: String, to url: String, file: String) throws {
        let manifestPath = repo + "/manifest.json"
        var object = try JSONSerialization.jsonObject(with: Data(FileSystem.read(manifestPath))) as! [String: Any]
        var packages = object["packages"] as! [[String: Any]]
        packages[0]["deltas"] = [
            ["from": "1.0", "url": url, "sha256": try FileHasher.sha256(ofFile: file), "size": Int(FileSystem.fileSize(file)!)]
        ]
        object["packages"] = packages
        try FileSystem.writeAtomically(Array(JSONSerialization.data(withJSONObject: object)), to: manifestPath)
    }
}
