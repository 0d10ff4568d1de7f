internal import CSystemShims

/// glibc's malloc arenas, for a process that sets its own memory policy: the CLI, never a host's app.
package enum MallocArenas {
    /// At most `count` arenas for the threads that allocate from now on. glibc gives each thread that
    /// allocates an arena of its own, and an arena keeps the pages its frees leave.
    package static func limit(to count: Int32) { _ = csystemshims_limit_malloc_arenas(count) }

    /// Blocks over `mmapAbove` bytes get pages of their own, given back when freed, and the heap gives
    /// back what is free at its top past `trimAbove`, both for good. Left to itself glibc raises both
    /// each time a mapped block is freed, to that block's size and twice it: once a 2 MiB decoder
    /// window had been freed, the next ones came from the heap, which then kept 4 MiB free at its top.
    package static func fixThresholds(mmapAbove: Int32, trimAbove: Int32) {
        _ = csystemshims_fix_malloc_thresholds(mmapAbove, trimAbove)
    }
}
