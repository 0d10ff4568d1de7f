#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <unistd.h>
#include "CSystemShims.h"

int csystemshims_syncfs(int fd) {
    return syncfs(fd);
}

int csystemshims_exchange(const char *first, const char *second) {
    return renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE);
}

int csystemshims_mark_top_folder(int fd) {
    // The kernel reads and writes an int here, whatever the ioctl's declared size (as chattr does).
    int flags = 0;
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return -1;
    if (flags & FS_TOPDIR_FL) return 0;
    flags |= FS_TOPDIR_FL;
    return ioctl(fd, FS_IOC_SETFLAGS, &flags);
}
