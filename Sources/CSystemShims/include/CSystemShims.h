#ifndef OFFLINEPKG_CSYSTEMSHIMS_H
#define OFFLINEPKG_CSYSTEMSHIMS_H

// syncfs(2) is a GNU extension: glibc declares it only under _GNU_SOURCE, which Swift's Glibc
// module is not built with, so Swift cannot see it. This target compiles with _GNU_SOURCE and
// re-exports it under the module's prefix.
int csystemshims_syncfs(int fd);

// renameat2(2) with RENAME_EXCHANGE swaps two paths atomically: a repaired tree replaces a damaged
// one in a single step, with no moment where the path is missing. Also GNU-only in glibc's headers.
int csystemshims_exchange(const char *first, const char *second);

// renameat2(2) with RENAME_NOREPLACE: moves a name unless the destination exists (EEXIST), in one
// step; EINVAL where the file system does not support the flag.
int csystemshims_rename_noreplace(const char *source, const char *destination);

// accept4(2) with SOCK_CLOEXEC: an accepted socket is close-on-exec from its first moment, so a
// process the host starts in between never inherits a client connection. GNU-only as well. (A struct
// sockaddr and a socklen_t; this header includes no system header, whose types would then be this
// module's to Swift.)
int csystemshims_accept_cloexec(int fd, void *address, unsigned int *length);

// fcntl(2)'s F_SETPIPE_SZ and F_GETPIPE_SZ (Linux, GNU-only in glibc's headers): a pipe's capacity
// in bytes, set (rounded up by the kernel) and read; -1 and errno on failure.
int csystemshims_set_pipe_capacity(int fd, int bytes);
int csystemshims_pipe_capacity(int fd);

// mallopt(3)'s M_ARENA_MAX: at most `count` malloc arenas for the threads that allocate from now on.
// <malloc.h> is not part of Swift's Glibc module.
int csystemshims_limit_malloc_arenas(int count);
// mallopt(3)'s M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, both fixed (which ends glibc's raising them);
// 1 when both were taken.
int csystemshims_fix_malloc_thresholds(int mmap_threshold, int trim_threshold);

// pthread_setname_np(3) names the calling thread as top and /proc show it (15 bytes and a NUL);
// GNU-only in glibc's headers.
int csystemshims_name_thread(const char *name);

// SIGINT and SIGTERM caught by a handler that writes the signal's number, one byte, to a new pipe
// (both ends close-on-exec and non-blocking; the read end in *read_end, the write end in *write_end):
// installed at once, so none is lost to a window in which no one takes it. 0, or -1 with errno.
// `csystemshims_restore_termination_signals(write_end)` puts back the default actions, if that pipe is
// still the one the handler writes to (a later call made another).
int csystemshims_termination_signal_pipe(int *read_end, int *write_end);
void csystemshims_restore_termination_signals(int write_end);

// Takes pages of files mapped read-only out of this process's resident set (madvise MADV_DONTNEED):
// the next read of one maps it again from the page cache, so nothing but the mapping is lost. Only the
// pages /proc/self/pagemap reports present and still the file's are dropped; a page the process wrote
// (an anonymous copy: a text relocation, a debugger's breakpoint) stays, and so does everything when
// pagemap cannot be read. `drop_file_pages` does it for a page-aligned range of one such mapping (for
// tests); `drop_read_only_object_pages` for every segment the executable and its loaded libraries map
// without write access: code and read-only data, of which the kernel maps 64 KiB around each page
// fault, and which start-up reads once (the loader's relocation tables, libraries' initialisation).
// Both return the bytes dropped, or -1 with errno.
long csystemshims_drop_file_pages(void *start, unsigned long length);
long csystemshims_drop_read_only_object_pages(void);

// Lazy loading of a shared library (CArchive, CCurl, CMicroHTTPD): the binary is not linked with the
// library; each function of it the code calls is a stub of the same name that opens the library at its
// first call (dlopen, by its soname) and jumps to the real function (dlsym), so a command that never
// calls it never maps it or the libraries it needs. `*handle` and `*slot` are the caller's statics,
// read and written atomically; the result is never NULL: where the library or the function is missing,
// this says so on stderr and aborts, as the dynamic loader would have at start-up.
//
// `own_scope` opens the library with RTLD_DEEPBIND: its dependencies look up symbols in its own tree
// before the process's global scope. A library opened later is looked up after the executable and its
// direct dependencies (libzstd, libm, libc ...), which every one of its relocations checks first: for a tree
// as large as libcurl's (OpenSSL, GnuTLS, krb5, LDAP), a fifth of its loading, more than curl pays. It
// also keeps the tree off this binary's own lazy stubs of the same names (libssl's calls into libcrypto
// would bind to CCrypto's `EVP_*`). Not under AddressSanitizer, which refuses RTLD_DEEPBIND.
void *csystemshims_lazy_symbol(const char *soname, int own_scope, void **handle, const char *name, void **slot);

// A stub for `result name parameters` in `soname`; `arguments` names the parameters. For C files only.
#define CSYSTEMSHIMS_LAZY_FUNCTION(soname, own_scope, handle, result, name, parameters, arguments) \
    result name parameters { \
        static void *slot; \
        void *function = __atomic_load_n(&slot, __ATOMIC_ACQUIRE); \
        if (!function) function = csystemshims_lazy_symbol(soname, own_scope, &handle, #name, &slot); \
        return ((result(*) parameters)function) arguments; \
    }

// The same for a function that returns nothing.
#define CSYSTEMSHIMS_LAZY_VOID_FUNCTION(soname, own_scope, handle, name, parameters, arguments) \
    void name parameters { \
        static void *slot; \
        void *function = __atomic_load_n(&slot, __ATOMIC_ACQUIRE); \
        if (!function) function = csystemshims_lazy_symbol(soname, own_scope, &handle, #name, &slot); \
        ((void(*) parameters)function) arguments; \
    }

// A function `getter` returning `name`'s address in `soname` as `type`: for a variadic function, which
// a stub cannot pass `...` on to, a wrapper calls it through a pointer of its variadic type.
#define CSYSTEMSHIMS_LAZY_POINTER(soname, own_scope, handle, type, getter, name) \
    static type getter(void) { \
        static void *slot; \
        void *function = __atomic_load_n(&slot, __ATOMIC_ACQUIRE); \
        if (!function) function = csystemshims_lazy_symbol(soname, own_scope, &handle, name, &slot); \
        return (type)function; \
    }

// A library's stub file (CArchive.c, CCrypto.c, CCurl.c, CMicroHTTPD.c) defines CSYSTEMSHIMS_SONAME and
// then includes this header: its stubs are one line each, `LAZY(result, name, (parameters), (names))`.
// It defines CSYSTEMSHIMS_OWN_SCOPE as 1 to open its library with `own_scope`.
#ifdef CSYSTEMSHIMS_SONAME
#ifndef CSYSTEMSHIMS_OWN_SCOPE
#define CSYSTEMSHIMS_OWN_SCOPE 0
#endif
static void *csystemshims_library;
#define LAZY(result, name, parameters, arguments) \
    CSYSTEMSHIMS_LAZY_FUNCTION(CSYSTEMSHIMS_SONAME, CSYSTEMSHIMS_OWN_SCOPE, csystemshims_library, result, name, parameters, arguments)
#define LAZY_VOID(name, parameters, arguments) \
    CSYSTEMSHIMS_LAZY_VOID_FUNCTION(CSYSTEMSHIMS_SONAME, CSYSTEMSHIMS_OWN_SCOPE, csystemshims_library, name, parameters, arguments)
#define LAZY_POINTER(type, getter, name) \
    CSYSTEMSHIMS_LAZY_POINTER(CSYSTEMSHIMS_SONAME, CSYSTEMSHIMS_OWN_SCOPE, csystemshims_library, type, getter, name)
#endif

// The kernel's socket diagnostics (NETLINK_SOCK_DIAG, inet_diag): whose socket is the other end of a
// TCP connection on this machine. Netlink messages are C structs laid out by macros (NLMSG_DATA,
// NLMSG_NEXT) that Swift cannot call. `open` makes the netlink socket (close-on-exec, a 1 s receive
// timeout); -1 and errno when the kernel has none.
int csystemshims_sock_diag_open(void);

// The uid and socket inode of the TCP socket whose own address is `peer` and whose remote address is
// `local` (both struct sockaddr_in or sockaddr_in6 of one family, as getpeername and getsockname give
// them on the accepting side): the client's end of an accepted loopback connection. 0 on success; -1
// and errno otherwise: ENOENT when no such socket is on this machine (the peer is elsewhere, or gone).
// An inode of 0 means a socket no process holds any more (closed, lingering).
int csystemshims_sock_diag_tcp_owner(int diag, const void *peer, const void *local, unsigned int *uid,
                                     unsigned long *inode);

#endif
