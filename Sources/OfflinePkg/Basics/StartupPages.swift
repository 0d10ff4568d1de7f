internal import CSystemShims
import Synchronization

/// The pages of code and read-only data that start-up mapped, for a process that sets its own memory
/// policy (the CLI's sync), never a host's app. The kernel maps the 64 KiB around each page fault of a
/// file, and start-up reads much that nothing reads again: the loader's relocation tables, the Swift
/// runtime's first scans, OpenSSL's and libcurl's initialisation. Those pages stay in the resident set
/// for the whole process, beside the unpack's buffers. Dropped once before the first unpack, the code
/// that runs after maps again from the page cache, a fault per 64 KiB, and the rest is gone from the
/// process (docs/design.md, "Memory").
package final class StartupPages: Sendable {
    /// The process's: the one the CLI arms and every unpack looks at, unless given another (tests).
    package static let shared = StartupPages()

    private let armed = Atomic<Bool>(false)

    package init() {}

    /// Has the next unpack to start drop them first (`ArchiveUnpacker.unpack`), once.
    package func dropBeforeNextUnpack() { armed.store(true, ordering: .relaxed) }

    /// Whether a drop is still to come.
    package var isArmed: Bool { armed.load(ordering: .relaxed) }

    /// Drops them now if armed.
    func dropIfArmed() {
        guard armed.exchange(false, ordering: .relaxed) else { return }
        Self.dropReadOnlyPages()
    }

    /// Takes every page that the executable and its loaded libraries map without write access out of
    /// this process's resident set, but those it wrote; returns the bytes dropped, or nil where
    /// /proc/self/pagemap cannot be read (then nothing is dropped). A page read again is mapped again
    /// from the page cache: nothing but the mapping is lost.
    @discardableResult
    package static func dropReadOnlyPages() -> Int? {
        let dropped = csystemshims_drop_read_only_object_pages()
        return dropped < 0 ? nil : dropped
    }

    /// The same for the pages of `range` (page-aligned, inside one mapping of a file without write
    /// access): those still the file's are dropped, those the process wrote stay.
    @discardableResult
    package static func dropFilePages(_ range: UnsafeRawBufferPointer) -> Int? {
        let dropped = csystemshims_drop_file_pages(UnsafeMutableRawPointer(mutating: range.baseAddress), UInt(range.count))
        return dropped < 0 ? nil : dropped
    }
}
