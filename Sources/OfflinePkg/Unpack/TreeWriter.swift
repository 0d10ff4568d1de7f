#if canImport(Glibc)
import Glibc
#endif

/// Writes an unpacked tree below one staging folder with nothing that can follow a link: every folder
/// is opened one component at a time with `O_NOFOLLOW | O_DIRECTORY` below its parent's descriptor,
/// every file is created with `O_CREAT | O_EXCL | O_NOFOLLOW` (a new inode or an error), read-only from
/// its birth (or, under a umask that would clear a read bit, set so on the open descriptor). So even an
/// entry a check let through could not reach outside staging.
///
/// The descriptors of the last folder chain stay open: archives list a folder's files together, so a
/// file costs one `openat` (which gives it its final mode), its writes and one `close`. Only the first
/// `chainLimit` levels of the chain are kept: a tree nested a thousand deep (the 4095 path bytes allow
/// 2,047 levels) would otherwise hold a descriptor per level and lane and fail, under the common soft
/// limit of 1,024, with "too many open files": an I/O error on every device, and nothing the publisher's
/// `verify`, which opens no folder, could see. A folder deeper than that is reached again from the
/// chain's last kept level for each file.
package final class TreeWriter {
    /// The staging folder, for messages.
    package let root: String
    /// A delta unpacks over hard links to the old tree: unlink the name first, then create, so an
    /// installed tree's inode is never written through.
    package let replacesFiles: Bool
    private let rootFD: FileDescriptor
    private var chainNames: [Substring] = []
    private var chainFDs: [FileDescriptor] = []
    /// The folder `folder` last returned when it lies deeper than the kept chain; closed by the next call.
    private var beyondChain: FileDescriptor?
    /// The chain's levels kept open: real sites nest a few levels, and four lanes of this many stay far
    /// below a 1,024 descriptor limit.
    static let chainLimit = 64

    /// An entry that cannot be written where the tree already has something else (a delta's file over
    /// an old folder, or a folder over an old file): a refusal of the archive, not a disk failure.
    package struct Conflict: Error {
        package var reason: String
    }

    package init(root: String, replacesFiles: Bool) throws {
        self.root = root
        self.replacesFiles = replacesFiles
        do { rootFD = try FileDescriptor.openFolder(path: root) } catch {
            throw OfflinePkgError.io(path: root, operation: "open", error)
        }
    }

    deinit {
        chainFDs.forEach { $0.close() }
        beyondChain?.close()
        rootFD.close()
    }

    /// Makes the folder `path` (relative, clean) and its parents.
    package func makeFolder(_ path: String) throws {
        _ = try folder(path.split(separator: "/")[...], for: path)
    }

    /// Creates the file `path` (relative, clean), runs `write` with its descriptor, and closes it 0400.
    package func writeFile<R>(_ path: String, _ write: (FileDescriptor) throws -> R) throws -> R {
        let file = try create(path)
        let result: R
        do { result = try write(file.descriptor) } catch {
            file.abandon()
            throw error
        }
        try file.close()
        return result
    }

    /// A file `create` made, open for writing until `close` (or `abandon`).
    package struct NewFile {
        package let descriptor: FileDescriptor
        /// Its path below the staging folder, for messages.
        package let shownPath: String
        let bornReadOnly: Bool

        /// Makes it 0400 (when it was not born so) and closes it: a late write error counts.
        package func close() throws {
            if !bornReadOnly {
                do { try descriptor.setMode(0o400) } catch {
                    abandon()
                    throw OfflinePkgError.io(path: shownPath, operation: "chmod", error)
                }
            }
            // close reports a late write error on some file systems (quota, NFS): it counts.
            if Glibc.close(descriptor.rawValue) != 0 {
                throw OfflinePkgError.io(path: shownPath, operation: "close", Errno.current)
            }
        }

        /// Closes it after a failure: the staging folder it is in is about to be removed.
        package func abandon() { descriptor.close() }
    }

    /// Creates the file `path` (relative, clean), open for writing. It is born 0400 — read-only, and the
    /// user's alone (docs/protocol.md#neighbours-on-the-device) — when the umask keeps that bit (the descriptor is writable all the same):
    /// one `fchmod` a file fewer; under a umask that would clear it, it is created 0600 and set 0400 by
    /// `NewFile.close`.
    package func create(_ path: String) throws -> NewFile {
        let (parent, name) = try parentAndName(path)
        try clearName(name, in: parent, for: path)
        let bornReadOnly = Self.umaskKeepsReadBits
        do {
            return NewFile(
                descriptor: try parent.createFile(name, mode: bornReadOnly ? 0o400 : 0o600), shownPath: root + "/" + path,
                bornReadOnly: bornReadOnly)
        } catch {
            if error.rawValue == EEXIST { throw Conflict(reason: "path is both a file and a folder") }
            throw OfflinePkgError.io(path: root + "/" + path, operation: "create", error)
        }
    }

    /// Whether the process's umask leaves 0400 whole, from `/proc/self/status` (reading it with
    /// `umask(2)` would set it, racing other threads). Unknown counts as no.
    static let umaskKeepsReadBits: Bool = {
        guard let status = try? FileSystem.read("/proc/self/status", limit: 1 << 16) else { return false }
        let text = String(decoding: status, as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
            let mask = mode_t(String(line.dropFirst("Umask:".count).filter { $0 != " " && $0 != "\t" }), radix: 8)
        else { return false }
        return mask & 0o400 == 0
    }()

    /// Makes the file `path` (relative, clean) a hard link to the existing file `source` (an absolute
    /// path the store controls, e.g. held content): a tree built from what is already on disk.
    package func linkFile(_ path: String, to source: String) throws {
        if let error = try link(path, to: source) {
            throw OfflinePkgError.io(path: "\(source) -> \(root)/\(path)", operation: "link", error)
        }
    }

    /// `linkFile`, or false when `source` is missing or has as many links as the file system allows:
    /// the caller then writes the file itself.
    package func linkFileIfPossible(_ path: String, to source: String) throws -> Bool {
        guard let error = try link(path, to: source) else { return true }
        if error.rawValue == ENOENT || error.rawValue == EMLINK { return false }
        throw OfflinePkgError.io(path: "\(source) -> \(root)/\(path)", operation: "link", error)
    }

    /// Links `path` to `source`; the error of the link, or nil when it was made.
    private func link(_ path: String, to source: String) throws -> Errno? {
        let (parent, name) = try parentAndName(path)
        try clearName(name, in: parent, for: path)
        do throws(Errno) { _ = try valueOrErrno { linkat(AT_FDCWD, source, parent.rawValue, name, 0) } } catch {
            if error.rawValue == EEXIST { throw Conflict(reason: "path is both a file and a folder") }
            return error
        }
        return nil
    }

    /// Runs `body` with the descriptor of the folder holding `path` and the last component: the content
    /// store links a written file's name from there without a path walk that could follow a link.
    package func withParent<R>(of path: String, _ body: (FileDescriptor, String) throws -> R) throws -> R {
        let (parent, name) = try parentAndName(path)
        return try body(parent, name)
    }

    private func parentAndName(_ path: String) throws -> (FileDescriptor, String) {
        let components = path.split(separator: "/")
        return (try folder(components.dropLast(), for: path), String(components.last!))
    }

    /// A delta's target name is unlinked before it is written or linked anew.
    private func clearName(_ name: String, in parent: FileDescriptor, for path: String) throws {
        guard replacesFiles else { return }
        do { try parent.unlink(name) } catch {
            switch error.rawValue {
            case ENOENT: break
            case EISDIR, EPERM: throw Conflict(reason: "path is both a file and a folder")
            default: throw OfflinePkgError.io(path: root + "/" + path, operation: "unlink", error)
            }
        }
    }

    /// The descriptor of the folder named by `components`, opening (and making) what the cached chain
    /// lacks. Components compare as bytes.
    private func folder(_ components: ArraySlice<Substring>, for path: String) throws -> FileDescriptor {
        beyondChain?.close()
        beyondChain = nil
        var depth = 0
        for (cached, wanted) in zip(chainNames, components) {
            guard cached.utf8.elementsEqual(wanted.utf8) else { break }
            depth += 1
        }
        while chainFDs.count > depth {
            chainFDs.removeLast().close()
            chainNames.removeLast()
        }
        var current = chainFDs.last ?? rootFD
        for name in components.dropFirst(depth) {
            current = try openOrMake(String(name), in: current, for: path)
            if chainFDs.count < Self.chainLimit {
                chainFDs.append(current)
                chainNames.append(name)
            } else {
                // `current` was opened from the one before it, which is no longer needed.
                beyondChain?.close()
                beyondChain = current
            }
        }
        return current
    }

    private func openOrMake(_ name: String, in parent: FileDescriptor, for path: String) throws -> FileDescriptor {
        do { return try parent.openFolder(name) } catch {
            switch error.rawValue {
            case ENOENT: break
            case ENOTDIR: throw Conflict(reason: "path is both a file and a folder")
            default: throw OfflinePkgError.io(path: root + "/" + path, operation: "open", error)
            }
        }
        do { try parent.makeFolder(name, mode: 0o700) } catch {
            if error.rawValue != EEXIST { throw OfflinePkgError.io(path: root + "/" + path, operation: "mkdir", error) }
        }
        do { return try parent.openFolder(name) } catch {
            if error.rawValue == ENOTDIR { throw Conflict(reason: "path is both a file and a folder") }
            throw OfflinePkgError.io(path: root + "/" + path, operation: "open", error)
        }
    }
}
