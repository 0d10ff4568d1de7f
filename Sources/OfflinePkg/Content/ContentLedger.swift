import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The running figure of held content, `content {files, bytes}` for `status`, kept in `content.json` so
/// that neither `status` nor a sync's collection walks all of `content/` (a stat per held file: 10,000
/// on a 10k-file root, at every sync).
///
/// Crash safety: before the first change of a session (a locked operation's inserts and removals) lands,
/// the file is rewritten "open" (`"open": <token>`, written, flushed, renamed); it is closed with the new
/// figure only once the session's last change is made. A kill in between leaves it open, and an open or
/// missing figure is never believed: `status` walks `content/` instead, and the next collection walks it
/// once and closes it. `verify` walks anyway and names a closed figure that differs (a release that did
/// not keep it changed the root); `verify --repair`, `gc` and the collections that walk write it afresh.
///
/// One ledger per root in a process, found by the root's path: every `ContentStore` value of the root,
/// however it was made (an unpacker's lane, a file-level fetch, a delta), counts into the same session,
/// because the figure is the disk's, not one component's.
package final class ContentLedger: Sendable {
    /// What `content.json` holds.
    package struct Figure: Codable, Sendable, Equatable {
        package var files: Int
        package var bytes: Int64
        /// Set while a session changes content: the figure is then not to be believed.
        package var open: String?
    }

    /// A held name for the session's sets: the sha256's 32 bytes, not its 64-character text.
    private struct Name: Hashable {
        var words: (UInt64, UInt64, UInt64, UInt64)

        /// From 64 lowercase hex digits; nil for anything else. Read in place: this runs once per
        /// file an install writes.
        init?(_ hex: String) {
            var hex = hex
            guard let words = hex.withUTF8({ Self.words($0) }) else { return nil }
            self.words = words
        }

        private static func words(_ digits: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64, UInt64, UInt64)? {
            guard digits.count == 64 else { return nil }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            for word in 0..<4 {
                var value: UInt64 = 0
                for index in 16 * word..<16 * word + 16 {
                    guard let nibble = Self.value(digits[index]) else { return nil }
                    value = value << 4 | UInt64(nibble)
                }
                switch word {
                case 0: words.0 = value
                case 1: words.1 = value
                case 2: words.2 = value
                default: words.3 = value
                }
            }
            return words
        }

        static func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x61...0x66: digit - 0x61 + 10
            default: nil
            }
        }

        /// The 64 hex digits again, for the held file's path.
        var hex: String {
            let digits = Array("0123456789abcdef".utf8)
            return String(unsafeUninitializedCapacity: 64) { out in
                for (word, value) in [words.0, words.1, words.2, words.3].enumerated() {
                    for index in 0..<16 { out[16 * word + index] = digits[Int(value >> (60 - 4 * index) & 0xf)] }
                }
                return 64
            }
        }

        static func == (a: Name, b: Name) -> Bool { a.words == b.words }
        func hash(into hasher: inout Hasher) {
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }
    }

    private struct Session {
        var token: String
        /// The figure before the session, less what it removed of it; nil when unknown (the file was
        /// missing or left open): the close walks.
        var base: Figure?
        /// Names the session created, with their sizes (`unknownSize` when the creator did not say):
        /// counted at the close without a stat each, unless orphans may be among them.
        var created: [Name: Int64] = [:]
        /// A staging tree holding inserted files was discarded (an install that failed): some created
        /// names may be linked by no tree, so the close stats each and collects those.
        var mayHoldOrphans = false
        /// Too many names to remember, or a change the session cannot count: the close walks.
        var uncounted = false
    }

    /// The size of a created name whose creator did not give it: the close stats it.
    private static let unknownSize: Int64 = -1

    private struct State {
        var session: Session?
        /// Held content hashed against its name in this locked operation (`ContentStore.checkedForReuse`).
        var sound: Set<Name> = []
        /// Damaged held content found and dropped, not yet reported: (path, problem).
        var damage: [(path: String, problem: String)] = []
    }

    /// Past this many created names a session stops remembering them and its close walks `content/`
    /// (about 48 bytes a name: 12 MiB at most). A 100k-file package stays well below it: a walk of its
    /// content is 100,000 stats at the end of the sync.
    package static let rememberedNames = 1 << 18

    let layout: CacheLayout
    private let state = Mutex(State())
    /// Full walks of `content/` this ledger made (tests: a sync that changed little walks nothing).
    private let walkCount = Atomic<Int>(0)

    private init(layout: CacheLayout) { self.layout = layout }

    private static let ledgers = Mutex<[String: ContentLedger]>([:])

    /// The ledger of `layout`'s root in this process.
    package static func of(_ layout: CacheLayout) -> ContentLedger {
        ledgers.withLock { ledgers in
            if let known = ledgers[layout.root] { return known }
            let ledger = ContentLedger(layout: layout)
            ledgers[layout.root] = ledger
            return ledger
        }
    }

    package var walks: Int { walkCount.load(ordering: .relaxed) }

    /// The figure on disk, when it is closed (to be believed).
    package func closedFigure() -> Figure? {
        guard let figure = Self.load(layout), figure.open == nil else { return nil }
        return figure
    }

    private static func load(_ layout: CacheLayout) -> Figure? {
        guard let bytes = try? FileSystem.read(layout.contentUsage, limit: 4096) else { return nil }
        return try? JSONDecoder().decode(Figure.self, from: Data(bytes))
    }

    /// Writes the figure. Only an open one must be on disk before anything else happens (`durable`); a
    /// closed one that a power cut loses leaves the open one, or none, and either is walked, never believed.
    private func save(_ figure: Figure, durable: Bool = true) throws {
        try FileSystem.writeAtomically(JSONCoding.encode(figure, pretty: false), to: layout.contentUsage, durable: durable)
    }

    /// A new locked operation (the root lock was taken): held content is hashed again before reuse, and
    /// a session an earlier operation of this process left open (a sync that failed before its close)
    /// is dropped: between the two locks another process may have closed the figure, and changes
    /// counted on that session would land under a closed figure, believed and wrong. Its figure on
    /// disk is still open unless another process walked, so the next close walks and finds its orphans.
    package func lockTaken() {
        state.withLock { state in
            state.sound = []
            state.session = nil
        }
    }

    /// Called before any change to `content/`'s names: opens the session on disk first, so a kill after
    /// the change finds the figure open, not closed and wrong.
    package func willChange() throws {
        try state.withLock { state in
            guard state.session == nil else { return }
            var base = Self.load(layout)
            if base?.open != nil { base = nil }
            // A root with no held content at all starts from nothing, known.
            if base == nil && !ContentStore.holdsAny(in: layout) {
                base = Figure(files: 0, bytes: 0)
            }
            let token = UUID().uuidString.lowercased()
            do {
                try save(Figure(files: base?.files ?? 0, bytes: base?.bytes ?? 0, open: token))
            } catch {
                // An open figure could not be written: none at all is just as safe (never believed).
                FileSystem.discardFile(layout.contentUsage)
                if FileSystem.exists(layout.contentUsage) { throw error }
            }
            state.session = Session(token: token, base: base)
        }
    }

    /// The name `sha256` was created (a new held file) for a file of `size` bytes (nil: the close stats
    /// it). With `hashed`, its bytes were hashed on their way in, in this locked operation: sound for
    /// reuse without another hash. An installed tree's file taken in later (`takeInPendingTrees`) was
    /// not, and is hashed before its first reuse, like any content held from before.
    package func created(_ sha256: String, size: Int64? = nil, hashed: Bool = true) {
        guard let name = Name(sha256) else {
            state.withLock { $0.session?.uncounted = true }
            return
        }
        state.withLock { state in
            if hashed { state.sound.insert(name) }
            // Taken out, not copied: a copy would leave the set shared, and every insert would copy
            // all of it: quadratic in the files of an install.
            guard var session = state.session.take() else { return }
            defer { state.session = session }
            guard !session.uncounted else { return }
            session.created[name] = size ?? Self.unknownSize
            if session.created.count > Self.rememberedNames {
                session.created = [:]
                session.uncounted = true
            }
        }
    }

    /// The held name `sha256` now names other bytes (an orphan replaced): counted at the close (by a
    /// stat) when the session created it, else not countable here.
    package func replaced(_ sha256: String) {
        let name = Name(sha256)
        state.withLock { state in
            if let name { state.sound.insert(name) }
            if let name, state.session?.created[name] != nil {
                state.session?.created[name] = Self.unknownSize
                return
            }
            state.session?.uncounted = true
        }
    }

    /// A staging tree that may hold inserted files was discarded: the close looks for orphans among
    /// the names this session created.
    package func stagingDiscarded() {
        state.withLock { $0.session?.mayHoldOrphans = true }
    }

    /// The held name `sha256`, of `size` bytes, was removed.
    package func removed(_ sha256: String, size: Int64) {
        let name = Name(sha256)
        state.withLock { state in
            if let name { state.sound.remove(name) }
            guard var session = state.session.take() else { return }
            defer { state.session = session }
            if (name.flatMap { session.created.removeValue(forKey: $0) }) == nil && !session.uncounted {
                session.base?.files -= 1
                session.base?.bytes -= size
            }
        }
    }

    /// A change the session does not count (a repair's relinks): its close walks.
    package func uncounted() {
        state.withLock { $0.session?.uncounted = true }
    }

    /// Ends the session: writes the closed figure, the session's own count when it is exact, else a walk
    /// of `content/`. With `removingOrphans`, held files no tree links (`st_nlink == 1`) that the session
    /// created (or, on a walk, all of them) are removed first; returns those. With `walk`, walks whatever
    /// the session knows (`gc`). Without a session and with a closed figure there is nothing to do.
    @discardableResult
    package func close(removingOrphans: Bool, walk: Bool = false) throws -> [(path: String, size: Int64)] {
        try state.withLock { state in
            let session = state.session
            let onDisk = Self.load(layout)
            if session == nil && !walk, let onDisk, onDisk.open == nil { return [] }
            var removed = [(path: String, size: Int64)]()
            var figure: Figure
            if !walk, let session, !session.uncounted, var base = session.base, onDisk?.open == session.token {
                for (name, size) in session.created {
                    // Every name created is linked by a tree that was committed, unless a staging tree
                    // was discarded: then each is looked at, and an orphan goes.
                    if size != Self.unknownSize && !(removingOrphans && session.mayHoldOrphans) {
                        base.files += 1
                        base.bytes += size
                        continue
                    }
                    let path = layout.content(sha256: name.hex)
                    guard let info = ContentStore.status(of: path) else { continue }
                    if removingOrphans && info.st_nlink == 1 && unlink(path) == 0 {
                        removed.append((path, Int64(info.st_size)))
                        continue
                    }
                    base.files += 1
                    base.bytes += Int64(info.st_size)
                }
                figure = base
            } else {
                walkCount.add(1, ordering: .relaxed)
                figure = Figure(files: 0, bytes: 0)
                ContentStore(layout: layout).heldFiles { path, _, info in
                    if removingOrphans && info.st_nlink == 1 && unlink(path) == 0 {
                        removed.append((path, Int64(info.st_size)))
                        return
                    }
                    figure.files += 1
                    figure.bytes += Int64(info.st_size)
                }
            }
            figure.open = nil
            // Two fsyncs fewer per sync: see `save`.
            try save(figure, durable: false)
            state.session = nil
            return removed
        }
    }

    /// Whether `sha256`'s held file was hashed sound in this locked operation.
    package func isKnownSound(_ sha256: String) -> Bool {
        guard let name = Name(sha256) else { return false }
        return state.withLock { $0.sound.contains(name) }
    }

    package func noteSound(_ sha256: String) {
        guard let name = Name(sha256) else { return }
        state.withLock { _ = $0.sound.insert(name) }
    }

    /// Damaged held content was dropped: kept until the installer reports it (`takeDamage`).
    package func noteDamage(path: String, problem: String) {
        state.withLock { $0.damage.append((path, problem)) }
    }

    package func takeDamage() -> [(path: String, problem: String)] {
        state.withLock { state in
            defer { state.damage = [] }
            return state.damage
        }
    }
}
