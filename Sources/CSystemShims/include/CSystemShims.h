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
