#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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

void *csystemshims_lazy_symbol(const char *soname, void **handle, const char *name, void **slot) {
    void *library = __atomic_load_n(handle, __ATOMIC_ACQUIRE);
    if (!library) {
        // Two threads may both open it: dlopen counts references and hands both the same handle.
        library = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
        if (!library) {
            fprintf(stderr, "offlinepkg: cannot load %s, which this command needs: %s\n", soname, dlerror());
            abort();
        }
        __atomic_store_n(handle, library, __ATOMIC_RELEASE);
    }
    void *function = dlsym(library, name);
    if (!function) {
        fprintf(stderr, "offlinepkg: %s has no function %s: %s\n", soname, name, dlerror());
        abort();
    }
    __atomic_store_n(slot, function, __ATOMIC_RELEASE);
    return function;
}
