import OfflinePkgTestSupport
import Testing

@testable import OfflinePkg

/// Which names are `writeAtomically`'s temporaries, and whose: read byte by byte.
@Suite("Atomic writers' temporary names")
struct AtomicWriterNameTests {
    @Test(arguments: [
        ("state.json.tmp-4242", 4242),
        ("a.tmp-1.tmp-77", 77),
        ("x.tmp-1", 1),
        // Not a temporary: no name before the suffix, no pid, a pid not written as one, out of range.
        (".tmp-4242", nil),
        ("tmp-4242", nil),
        ("x.tmp-", nil),
        ("x.tmp-0", nil),
        ("x.tmp-042", nil),
        ("x.tmp--42", nil),
        ("x.tmp-+42", nil),
        ("x.tmp-42x", nil),
        ("x.tmp-99999999999", nil),
        ("x.tmp-4\u{301}2", nil),
        ("é.tmp-9", 9),
    ] as [(String, Int32?)])
    func writerOfATemporary(name: String, pid: Int32?) {
        #expect(FileSystem.atomicWriter(ofTemporary: name) == pid)
    }
}
