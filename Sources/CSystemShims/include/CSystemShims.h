#ifndef OFFLINEPKG_CSYSTEMSHIMS_H
#define OFFLINEPKG_CSYSTEMSHIMS_H

// syncfs(2) is a GNU extension: glibc declares it only under _GNU_SOURCE, which Swift's Glibc
// module is not built with, so Swift cannot see it. This target compiles with _GNU_SOURCE and
// re-exports it under the module's prefix.
int csystemshims_syncfs(int fd);

// renameat2(2) with RENAME_EXCHANGE swaps two paths atomically: a repaired tree replaces a damaged
// one in a single step, with no moment where the path is missing. Also GNU-only in glibc's headers.
int csystemshims_exchange(const char *first, const char *second);

#endif
