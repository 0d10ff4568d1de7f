import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The request target of a connection's current request as the client sent it, kept when its first line
/// came in (MHD's URI log callback, `requestBegan`). MHD then cuts the query off the target it hands
/// the access handler, in place, and splits the query at `&` and `=`: what is kept here is the only
/// whole copy. The runtime cache forwards the query as it came (docs/protocol.md#neighbours-on-the-device); `RequestChecks` tells a
/// query's end from a NUL byte inside the target by the length kept here.
final class RecordedTarget: Sendable {
    /// Bytes of the target up to its first NUL (all of it, for a target without one).
    let length = Atomic<Int>(0)
    /// Whether the query held a control byte (the path's are checked where MHD hands it over).
    let queryHasControlByte = Atomic<Bool>(false)
    private let query = Mutex<String?>(nil)
    private let hasQuery = Atomic<Bool>(false)

    /// Records `target` (a C string MHD still holds whole). A target without a query costs a `strlen`,
    /// a `memchr` and two atomic operations: no lock, no allocation.
    func record(_ target: UnsafePointer<CChar>) {
        let count = strlen(target)
        length.store(count, ordering: .relaxed)
        if let mark = memchr(target, Int32(UInt8(ascii: "?")), count) {
            let start = UnsafePointer(mark.assumingMemoryBound(to: UInt8.self)) + 1
            let end = UnsafeRawPointer(target).assumingMemoryBound(to: UInt8.self) + count
            let bytes = UnsafeBufferPointer(start: start, count: end - start)
            let text = Self.escaped(bytes)
            queryHasControlByte.store(bytes.contains { $0 < 0x20 || $0 == 0x7f }, ordering: .relaxed)
            query.withLock { $0 = text }
            hasQuery.store(true, ordering: .relaxed)
        } else if hasQuery.load(ordering: .relaxed) {
            query.withLock { $0 = nil }
            hasQuery.store(false, ordering: .relaxed)
            queryHasControlByte.store(false, ordering: .relaxed)
        }
    }

    /// The query of the current request, without its `?` (empty for a target ending in `?`), or nil.
    var currentQuery: String? { hasQuery.load(ordering: .relaxed) ? query.withLock { $0 } : nil }

    /// The query's bytes as URL text: those a URL may not hold raw (controls, space, non-ASCII, `"<>\^`{|}`
    /// and `#`) percent-encoded, the rest, escapes included, as they came.
    static func escaped(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        var text = ""
        text.reserveCapacity(bytes.count)
        for byte in bytes {
            if byte > 0x20 && byte < 0x7f && !"\"<>\\^`{|}#".utf8.contains(byte) {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xf, radix: 16, uppercase: true)
            }
        }
        return text
    }
}
