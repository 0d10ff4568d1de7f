#ifndef OFFLINEPKG_CMICROHTTPD_SHIM_H
#define OFFLINEPKG_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

// MHD_start_daemon and MHD_get_daemon_info are variadic, which Swift does not import; these inline
// wrappers fix the options the loopback server uses, so Swift never builds a va_list of mixed
// integers, pointers and function pointers by hand.

// Leaves the request target exactly as the client sent it. MHD percent-decodes it by default,
// which would turn an encoded "/" into a real one and cut the path at an encoded NUL: docs/protocol.md#lookups wants
// both to be a miss, so the lookup decodes the path itself.
static inline size_t cmicrohttpd_keep_escapes(void *cls, struct MHD_Connection *connection, char *uri) {
    (void)cls;
    (void)connection;
    return strlen(uri);
}

// What the loopback server sets on a daemon; the options go to MHD as one MHD_OPTION_ARRAY, so a
// daemon with TLS, a handed-over socket or a pool is started by one function.
// The daemon has no listening socket: the server accepts and hands it connections
// (MHD_add_connection).
struct cmicrohttpd_config {
    unsigned int flags;
    // Seconds of inactivity after which MHD closes a connection.
    unsigned int idle_timeout;
    // Each connection's memory pool (request line and headers, response headers), which MHD zeroes
    // whole after every request.
    size_t connection_memory;
    unsigned int connection_limit;
    // Stack of each thread MHD starts (0: the system default, 8 MiB of address space each).
    size_t thread_stack_size;
    // PEM key and certificate, or NULL for plain HTTP.
    const char *tls_key;
    const char *tls_certificate;
    MHD_AccessHandlerCallback handler;
    void *handler_context;
    MHD_NotifyConnectionCallback notify_connection;
    MHD_RequestCompletedCallback notify_completed;
    // Called when a request's first line is in, before its headers (MHD's URI log callback); its
    // result is the request's first context, so it returns NULL. With `notify_context`.
    void *(*request_began)(void *context, const char *uri, struct MHD_Connection *connection);
    void *notify_context;
};

static inline struct MHD_Daemon *cmicrohttpd_start(const struct cmicrohttpd_config *config) {
    struct MHD_OptionItem options[16];
    int count = 0;
#define CMICROHTTPD_OPTION(name, number, pointer) \
    do { \
        options[count].option = (name); \
        options[count].value = (intptr_t)(number); \
        options[count].ptr_value = (void *)(pointer); \
        count++; \
    } while (0)
    CMICROHTTPD_OPTION(MHD_OPTION_CONNECTION_TIMEOUT, config->idle_timeout, NULL);
    CMICROHTTPD_OPTION(MHD_OPTION_CONNECTION_MEMORY_LIMIT, config->connection_memory, NULL);
    CMICROHTTPD_OPTION(MHD_OPTION_CONNECTION_LIMIT, config->connection_limit, NULL);
    if (config->thread_stack_size > 0) CMICROHTTPD_OPTION(MHD_OPTION_THREAD_STACK_SIZE, config->thread_stack_size, NULL);
    // 1: an HTTP/1.1 request without Host is a 400 (RFC 9112 §3.2), as are spaces in the target.
    CMICROHTTPD_OPTION(MHD_OPTION_STRICT_FOR_CLIENT, 1, NULL);
    CMICROHTTPD_OPTION(MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)cmicrohttpd_keep_escapes, NULL);
    if (config->notify_connection) {
        CMICROHTTPD_OPTION(MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)config->notify_connection, config->notify_context);
    }
    if (config->notify_completed) {
        CMICROHTTPD_OPTION(MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)config->notify_completed, config->notify_context);
    }
    if (config->request_began) {
        CMICROHTTPD_OPTION(MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)config->request_began, config->notify_context);
    }
    if (config->tls_key && config->tls_certificate) {
        CMICROHTTPD_OPTION(MHD_OPTION_HTTPS_MEM_KEY, 0, config->tls_key);
        CMICROHTTPD_OPTION(MHD_OPTION_HTTPS_MEM_CERT, 0, config->tls_certificate);
    }
    CMICROHTTPD_OPTION(MHD_OPTION_END, 0, NULL);
#undef CMICROHTTPD_OPTION
    unsigned int flags = config->flags;
    if (config->tls_key && config->tls_certificate) flags |= MHD_USE_TLS;
    return MHD_start_daemon(
        flags, 0, NULL, NULL, config->handler, config->handler_context, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

// The connection's socket, or -1.
static inline int cmicrohttpd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

// What the connection notifier stored for this connection, or NULL.
static inline void *cmicrohttpd_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

// How many header fields named `name` (case-insensitively) the request has: MHD's lookup returns
// only the first, and two Host fields must be refused, not resolved by the first.
struct cmicrohttpd_field_count_state {
    const char *name;
    unsigned int count;
};

static inline enum MHD_Result cmicrohttpd_count_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    (void)value;
    struct cmicrohttpd_field_count_state *state = (struct cmicrohttpd_field_count_state *)cls;
    if (strcasecmp(key, state->name) == 0) state->count++;
    return MHD_YES;
}

static inline unsigned int cmicrohttpd_field_count(struct MHD_Connection *connection, const char *name) {
    struct cmicrohttpd_field_count_state state = {name, 0};
    MHD_get_connection_values(connection, MHD_HEADER_KIND, cmicrohttpd_count_field, &state);
    return state.count;
}

#endif
