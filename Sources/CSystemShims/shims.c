#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include "CSystemShims.h"

int csystemshims_syncfs(int fd) {
    return syncfs(fd);
}

int csystemshims_exchange(const char *first, const char *second) {
    return renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE);
}

int csystemshims_rename_noreplace(const char *source, const char *destination) {
    return renameat2(AT_FDCWD, source, AT_FDCWD, destination, RENAME_NOREPLACE);
}

int csystemshims_accept_cloexec(int fd, void *address, unsigned int *length) {
    return accept4(fd, (struct sockaddr *)address, (socklen_t *)length, SOCK_CLOEXEC);
}

int csystemshims_set_pipe_capacity(int fd, int bytes) {
    return fcntl(fd, F_SETPIPE_SZ, bytes);
}

int csystemshims_pipe_capacity(int fd) {
    return fcntl(fd, F_GETPIPE_SZ);
}

int csystemshims_name_thread(const char *name) {
    return pthread_setname_np(pthread_self(), name);
}
