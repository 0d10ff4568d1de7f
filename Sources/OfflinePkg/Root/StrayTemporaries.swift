#if canImport(Glibc)
import Glibc
#endif

/// Removes the temporaries that a process killed inside `FileSystem.writeAtomically` leaves behind
/// (`active.json.tmp-4242`, `state.json.tmp-4242`, a tree's `.index.tmp-…`). Only those of a process
/// that no longer runs go: `launch.json` is written by readers, which take no lock, so even the lock
/// holder cannot know that a live writer is not mid-write. A reused pid only delays the removal.
package enum StrayTemporaries {
    /// Returns the paths removed. Looks in the root, in `reports/` and in each package's folder of
    /// `trees/`, the folders the store writes atomically (downloads and staging are cleared whole elsewhere).
    @discardableResult
    package static func remove(in layout: CacheLayout) -> [String] {
        var removed = [String]()
        let folders: [(folder: String, path: (String) -> String)] =
            [(layout.root, layout.rootEntry), (layout.reports, layout.reportsEntry)]
            + FileSystem.contents(of: layout.trees).map { id in (layout.packageTrees(id), { layout.packageTreesEntry(id, $0) }) }
        for (folder, pathOf) in folders {
            for name in FileSystem.contents(of: folder) {
                guard let pid = FileSystem.atomicWriter(ofTemporary: name), pid != getpid(),
                    !FileSystem.processIsAlive(pid)
                else { continue }
                let path = pathOf(name)
                guard FileSystem.fileSize(path) != nil else { continue }
                FileSystem.discardFile(path)
                removed.append(path)
            }
        }
        return removed
    }
}
