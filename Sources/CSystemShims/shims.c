#define _GNU_SOURCE
#include <malloc.h>
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <errno.h>
#include <string.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/inet_diag.h>
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

int csystemshims_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

int csystemshims_fix_malloc_thresholds(int mmap_threshold, int trim_threshold) {
    return mallopt(M_MMAP_THRESHOLD, mmap_threshold) && mallopt(M_TRIM_THRESHOLD, trim_threshold);
}

int csystemshims_name_thread(const char *name) {
    return pthread_setname_np(pthread_self(), name);
}

static volatile sig_atomic_t termination_fd = -1;

static void forward_termination_signal(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    int fd = termination_fd;
    // A full pipe already holds a signal the reader has not taken: this one adds nothing.
    if (fd >= 0) (void)!write(fd, &byte, 1);
    errno = saved;
}

void csystemshims_restore_termination_signals(int write_end) {
    if (termination_fd != write_end) return;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    termination_fd = -1;
}

int csystemshims_termination_signal_pipe(int *read_end, int *write_end) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    termination_fd = ends[1];
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = forward_termination_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (sigaction(SIGINT, &action, NULL) != 0 || sigaction(SIGTERM, &action, NULL) != 0) {
        int saved = errno;
        csystemshims_restore_termination_signals(ends[1]);
        close(ends[0]);
        close(ends[1]);
        errno = saved;
        return -1;
    }
    *read_end = ends[0];
    *write_end = ends[1];
    return 0;
}


// /proc/self/pagemap: one 64-bit entry a page; bit 63 present, bit 61 a page of the file (not an
// anonymous copy made by a write).
#define PAGEMAP_PRESENT (1ULL << 63)
#define PAGEMAP_FILE (1ULL << 61)

static long drop_file_pages(int pagemap, uintptr_t start, uintptr_t end, uintptr_t page) {
    long dropped = 0;
    uintptr_t run = 0, address = start;
    while (address < end) {
        uint64_t entries[512];
        size_t count = (end - address) / page;
        if (count > 512) count = 512;
        ssize_t got = pread(pagemap, entries, count * sizeof entries[0], (off_t)(address / page * sizeof entries[0]));
        // Unreadable: what is not known to be the file's stays.
        if (got < (ssize_t)sizeof entries[0]) break;
        count = (size_t)got / sizeof entries[0];
        for (size_t i = 0; i < count; i++, address += page) {
            int file = (entries[i] & (PAGEMAP_PRESENT | PAGEMAP_FILE)) == (PAGEMAP_PRESENT | PAGEMAP_FILE);
            if (file && !run) run = address;
            if (!file && run) {
                if (madvise((void *)run, address - run, MADV_DONTNEED) == 0) dropped += (long)(address - run);
                run = 0;
            }
        }
    }
    if (run && madvise((void *)run, address - run, MADV_DONTNEED) == 0) dropped += (long)(address - run);
    return dropped;
}

long csystemshims_drop_file_pages(void *start, unsigned long length) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), first = (uintptr_t)start;
    if (first % page || length % page) {
        errno = EINVAL;
        return -1;
    }
    int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap < 0) return -1;
    long dropped = drop_file_pages(pagemap, first, first + length, page);
    close(pagemap);
    return dropped;
}

struct read_only_pages {
    int pagemap;
    uintptr_t page;
    uintptr_t vdso;
    long dropped;
};

static int drop_object_pages(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct read_only_pages *pages = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
        if (segment->p_type != PT_LOAD || (segment->p_flags & PF_W)) continue;
        uintptr_t start = info->dlpi_addr + segment->p_vaddr, end = start + segment->p_filesz;
        // The kernel's vDSO is no file.
        if (pages->vdso >= start && pages->vdso < end) return 0;
        // Whole pages only: a page shared with a writable segment may hold its written bytes.
        start = (start + pages->page - 1) & ~(pages->page - 1);
        end &= ~(pages->page - 1);
        if (start < end) pages->dropped += drop_file_pages(pages->pagemap, start, end, pages->page);
    }
    return 0;
}

long csystemshims_drop_read_only_object_pages(void) {
    struct read_only_pages pages = {.page = (uintptr_t)sysconf(_SC_PAGESIZE), .vdso = getauxval(AT_SYSINFO_EHDR)};
    pages.pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pages.pagemap < 0) return -1;
    // The loader's list lock is held through every callback: no object is unmapped meanwhile.
    dl_iterate_phdr(drop_object_pages, &pages);
    close(pages.pagemap);
    return pages.dropped;
}

void *csystemshims_lazy_symbol(const char *soname, int own_scope, void **handle, const char *name, void **slot) {
    void *library = __atomic_load_n(handle, __ATOMIC_ACQUIRE);
    if (!library) {
        int flags = RTLD_LAZY | RTLD_LOCAL;
        // Asked at run time: a fuzzer links this file, compiled without the sanitizer, into an ASan binary.
        if (own_scope && !dlsym(RTLD_DEFAULT, "__asan_init")) flags |= RTLD_DEEPBIND;
        // Two threads may both open it: dlopen counts references and hands both the same handle.
        library = dlopen(soname, flags);
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

int csystemshims_sock_diag_open(void) {
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -1;
    struct timeval timeout = {.tv_sec = 1, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return fd;
}

int csystemshims_sock_diag_tcp_owner(int diag, const void *peer_address, const void *local_address, unsigned int *uid,
                                     unsigned long *inode) {
    const struct sockaddr *peer = peer_address, *local = local_address;
    int family = peer->sa_family;
    if (family != local->sa_family || (family != AF_INET && family != AF_INET6)) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    // One sequence number per request: a late answer to an earlier one is skipped, never taken.
    static unsigned int sequence;
    unsigned int asked = __atomic_add_fetch(&sequence, 1, __ATOMIC_RELAXED);
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } message;
    memset(&message, 0, sizeof message);
    message.header.nlmsg_len = sizeof message;
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    // No NLM_F_DUMP: one socket, looked up by its four-tuple, as ss does for a single connection.
    message.header.nlmsg_flags = NLM_F_REQUEST;
    message.header.nlmsg_seq = asked;
    message.request.sdiag_family = (unsigned char)family;
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = ~0U;
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    // The socket asked for is the client's: its own (source) address is our peer, its remote
    // (destination) the address the server accepted on.
    if (family == AF_INET) {
        const struct sockaddr_in *from = peer_address, *to = local_address;
        message.request.id.idiag_sport = from->sin_port;
        message.request.id.idiag_dport = to->sin_port;
        memcpy(message.request.id.idiag_src, &from->sin_addr, 4);
        memcpy(message.request.id.idiag_dst, &to->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *from = peer_address, *to = local_address;
        message.request.id.idiag_sport = from->sin6_port;
        message.request.id.idiag_dport = to->sin6_port;
        memcpy(message.request.id.idiag_src, &from->sin6_addr, 16);
        memcpy(message.request.id.idiag_dst, &to->sin6_addr, 16);
    }
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(diag, &message, sizeof message, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) return -1;
    for (;;) {
        long buffer[1024];
        ssize_t received = recv(diag, buffer, sizeof buffer, 0);
        if (received < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        int length = (int)received;
        for (struct nlmsghdr *header = (struct nlmsghdr *)buffer; NLMSG_OK(header, length);
             header = NLMSG_NEXT(header, length)) {
            if (header->nlmsg_seq != asked) continue;
            if (header->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *error = NLMSG_DATA(header);
                errno = error->error == 0 ? ENOENT : -error->error;
                return -1;
            }
            if (header->nlmsg_type == NLMSG_DONE) {
                errno = ENOENT;
                return -1;
            }
            if (header->nlmsg_type != SOCK_DIAG_BY_FAMILY || header->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
                continue;
            }
            const struct inet_diag_msg *found = NLMSG_DATA(header);
            // The kernel found the socket by the four-tuple asked; checked all the same.
            if (found->id.idiag_sport != message.request.id.idiag_sport || found->id.idiag_dport != message.request.id.idiag_dport ||
                memcmp(found->id.idiag_src, message.request.id.idiag_src, family == AF_INET ? 4 : 16) != 0) {
                errno = ENOENT;
                return -1;
            }
            *uid = found->idiag_uid;
            *inode = found->idiag_inode;
            return 0;
        }
    }
}
