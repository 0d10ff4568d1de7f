#ifndef OFFLINEPKG_CSYSTEMSHIMS_H
#define OFFLINEPKG_CSYSTEMSHIMS_H

// syncfs(2) is a GNU extension: glibc declares it only under _GNU_SOURCE, which Swift's Glibc
// module is not built with, so Swift cannot see it. This target compiles with _GNU_SOURCE and
// re-exports it under the module's prefix.
int csystemshims_syncfs(int fd);

// renameat2(2) with RENAME_EXCHANGE swaps two paths atomically: a repaired tree replaces a damaged
// one in a single step, with no moment where the path is missing. Also GNU-only in glibc's headers.
int csystemshims_exchange(const char *first, const char *second);

// sync_file_range(2) with SYNC_FILE_RANGE_WRITE: starts writing a file's dirty pages without waiting
// (GNU-only in glibc's headers), so an unpacked tree's data is on its way to the disk while the rest of
// the archive unpacks and the sync's one syncfs has less left to wait for. Returns 0 or -1 (errno).
int csystemshims_start_writeback(int fd);

#endif
