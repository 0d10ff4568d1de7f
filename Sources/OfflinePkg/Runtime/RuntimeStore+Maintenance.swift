import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// One runtime-cache entry that `verify` found broken.
package struct RuntimeEntryDamage: Sendable, Codable, Equatable {
    /// The entry's head file.
    package var path: String
    package var problem: String
}

extension RuntimeStore {
    /// Files `gc` may remove: temporary bodies whose writer is gone, and bodies no head names. A body
    /// younger than a minute is left alone: a live process may be between its rename and its head.
    package static func garbage(in layout: CacheLayout, now: Date) -> [String] {
        var garbage = [String]()
        // Temporary names start (tmp/) or end (.tmp-<pid>-<random> heads) with the writer's pid.
        func writerIsGone(_ pidText: Substring?) -> Bool {
            guard let pid = pidText.flatMap({ Int32($0) }) else { return true }
            return kill(pid, 0) != 0 && errno == ESRCH
        }
        for name in FileSystem.contents(of: layout.runtimeTemporary) where writerIsGone(name.split(separator: "-").first) {
            garbage.append(layout.runtimeTemporaryFile(name))
        }
        var named = Set<String>()
        for name in FileSystem.contents(of: layout.runtimeEntries) {
            let path = layout.runtimeEntries + "/" + name
            if let range = name.firstRange(of: ".tmp-") {
                if writerIsGone(name[range.upperBound...].split(separator: "-").first) { garbage.append(path) }
            } else if let head = readHead(path) {
                named.insert(head.body)
            } else {
                garbage.append(path)
            }
        }
        for name in FileSystem.contents(of: layout.runtimeBodies) where !named.contains(name) {
            let path = layout.runtimeBody(name)
            var info = stat()
            if lstat(path, &info) == 0, now.timeIntervalSince1970 - Double(info.st_mtim.tv_sec) > 60 { garbage.append(path) }
        }
        return garbage
    }

    /// Checks every head: readable, named after its URL and variant, its body present with its size.
    package static func verify(_ layout: CacheLayout) -> [RuntimeEntryDamage] {
        var damage = [RuntimeEntryDamage]()
        for name in FileSystem.contents(of: layout.runtimeEntries).sorted() where name.hasSuffix(".meta") {
            let path = layout.runtimeEntries + "/" + name
            guard let head = readHead(path) else {
                damage.append(RuntimeEntryDamage(path: path, problem: "the head is not readable JSON"))
                continue
            }
            if head.key + ".meta" != name {
                damage.append(
                    RuntimeEntryDamage(path: path, problem: "named \(name), but its URL and variant give \(head.key).meta"))
            }
            let size = FileSystem.fileSize(layout.runtimeBody(head.body))
            if size != head.size {
                damage.append(
                    RuntimeEntryDamage(
                        path: path,
                        problem: size.map { "body \(head.body) has \($0) bytes, expected \(head.size)" }
                            ?? "body \(head.body) is missing"))
            }
        }
        return damage
    }

    /// Removes an entry `verify` found broken: its head and the body it names.
    package static func removeEntry(at path: String, layout: CacheLayout) {
        if let head = readHead(path) { FileSystem.discardFile(layout.runtimeBody(head.body)) }
        FileSystem.discardFile(path)
    }

    /// What `status` reports; nil for a root whose runtime cache was never used.
    package static func status(_ layout: CacheLayout) -> RuntimeCacheStatus? {
        guard FileSystem.isDirectory(layout.runtime) else { return nil }
        let (entries, bytes) = usage(layout)
        return RuntimeCacheStatus(entries: entries, bytes: bytes, counters: RuntimeStatistics.load(layout.runtimeStats))
    }

    /// Entries and bytes on disk, read from the heads (for `status` in another process than `serve`).
    package static func usage(_ layout: CacheLayout) -> (entries: Int, bytes: Int64) {
        var entries = 0
        var bytes: Int64 = 0
        for name in FileSystem.contents(of: layout.runtimeEntries) where name.hasSuffix(".meta") {
            guard let head = readHead(layout.runtimeEntries + "/" + name) else { continue }
            entries += 1
            bytes += diskBytes(head)
        }
        return (entries, bytes)
    }
}
