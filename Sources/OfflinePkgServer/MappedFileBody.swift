internal import CMicroHTTPD

#if canImport(Glibc)
import Glibc
#endif

/// Behind TLS, ranges, files too large for the response caches, and the large-file cache's bodies, sent
/// from a read-only memory map of the file: GnuTLS encrypts straight from the map, where from a
/// descriptor MHD reads 16 KiB blocks (several times the time for a large file). Over plain HTTP the same
/// bodies are sent from the open file with `sendfile` (`ResponseCache.Body.file`,
/// `RequestHandler.body`; docs/design.md, "Large bodies").
///
/// A map is only safe while the file keeps its size: a file truncated under it would fault the server
/// (SIGBUS). Installed trees are read-only and never rewritten in place — a repair or an update writes
/// a new tree, and a removed tree's files stay readable while mapped — so the size checked here holds.
enum MappedFileBody {
    private struct Region {
        var base: UnsafeMutableRawPointer
        var length: Int
    }

    private static let pageSize = Int64(sysconf(Int32(_SC_PAGESIZE)))

    /// A response whose body is `length` bytes at `offset` of the open file `descriptor`, unmapped when
    /// MHD frees it; nil when the file cannot be mapped. The caller keeps and closes `descriptor`.
    /// `populate`: fault every page in now (`MAP_POPULATE`), for a map that many requests will send
    /// (`ResponseCache`'s mapped entries): one batched walk instead of a fault per 64 KiB per send.
    static func response(descriptor: Int32, offset: Int64, length: Int64, populate: Bool = false) -> OpaquePointer? {
        guard length > 0 else { return MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT) }
        let start = offset & ~(pageSize - 1)
        let lead = Int(offset - start)
        let mapLength = lead + Int(length)
        guard let base = mmap(nil, mapLength, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), descriptor, off_t(start)), base != MAP_FAILED else {
            return nil
        }
        let region = UnsafeMutablePointer<Region>.allocate(capacity: 1)
        region.initialize(to: Region(base: base, length: mapLength))
        let response = MHD_create_response_from_buffer_with_free_callback_cls(
            Int(length), base + lead,
            { context in
                guard let region = context?.assumingMemoryBound(to: Region.self) else { return }
                munmap(region.pointee.base, region.pointee.length)
                region.deallocate()
            }, region)
        if response == nil {
            munmap(base, mapLength)
            region.deallocate()
        }
        return response
    }
}
