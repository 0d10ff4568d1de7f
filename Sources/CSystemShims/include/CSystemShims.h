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

// pthread_setname_np(3) names the calling thread as top and /proc show it (15 bytes and a NUL);
// GNU-only in glibc's headers.
int csystemshims_name_thread(const char *name);

#endif
