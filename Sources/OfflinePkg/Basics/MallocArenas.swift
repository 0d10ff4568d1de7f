internal import CSystemShims

/// glibc's malloc arenas, for a process that sets its own memory policy: the CLI, never a host's app.
package enum MallocArenas {
    /// At most `count` arenas for the threads that allocate from now on. glibc gives each thread that
    /// allocates an arena of its own, and an arena keeps the pages its frees leave.
    package static func limit(to count: Int32) { _ = csystemshims_limit_malloc_arenas(count) }
}
