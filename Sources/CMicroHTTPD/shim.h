#ifndef OFFLINEPKG_CMICROHTTPD_SHIM_H
#define OFFLINEPKG_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

// MHD_start_daemon and MHD_get_daemon_info are variadic, which Swift does not import; these two
// inline wrappers fix the options the loopback server uses, so Swift never builds a va_list of
// mixed integers, pointers and function pointers by hand.

// Leaves the request target exactly as the client sent it. MHD percent-decodes it by default,
// which would turn an encoded "/" into a real one and cut the path at an encoded NUL: SPEC §7 wants
// both to be a miss, so the lookup decodes the path itself.
static inline size_t cmicrohttpd_keep_escapes(void *cls, struct MHD_Connection *connection, char *uri) {
    (void)cls;
    (void)connection;
    return strlen(uri);
}

// Starts a daemon listening on `address`. `pool_size` > 0 selects epoll with that many threads;
// 0 selects one thread per connection (poll). `connection_memory` is each connection's memory pool
// (request line and headers, response headers), which MHD zeroes whole after every request.
static inline struct MHD_Daemon *cmicrohttpd_start_daemon(
    unsigned int flags, const struct sockaddr *address, unsigned int pool_size, unsigned int idle_timeout,
    size_t connection_memory, MHD_AccessHandlerCallback handler, void *handler_context) {
    if (pool_size > 0) {
        return MHD_start_daemon(
            flags, 0, NULL, NULL, handler, handler_context,
            MHD_OPTION_SOCK_ADDR, address,
            MHD_OPTION_THREAD_POOL_SIZE, pool_size,
            MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory,
            MHD_OPTION_UNESCAPE_CALLBACK, cmicrohttpd_keep_escapes, NULL,
            MHD_OPTION_END);
    }
    return MHD_start_daemon(
        flags, 0, NULL, NULL, handler, handler_context,
        MHD_OPTION_SOCK_ADDR, address,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory,
        MHD_OPTION_UNESCAPE_CALLBACK, cmicrohttpd_keep_escapes, NULL,
        MHD_OPTION_END);
}

// The port the daemon is bound to (the one the kernel picked when asked for port 0), or 0.
static inline uint16_t cmicrohttpd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}
#endif
