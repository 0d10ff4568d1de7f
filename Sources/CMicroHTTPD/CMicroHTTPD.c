// libmicrohttpd's functions that offlinepkg calls, as lazy stubs (CSystemShims.h says how), and the
// wrappers of its two variadic ones, which call the real function through a pointer of its variadic
// type. Each stub must match microhttpd.h's declaration, which the compiler checks.
#include "CMicroHTTPD.h"
// The soname Debian's libmicrohttpd12 installs.
#define CSYSTEMSHIMS_SONAME "libmicrohttpd.so.12"
#include "CSystemShims.h"

LAZY(enum MHD_Result, MHD_add_connection,
    (struct MHD_Daemon *a, MHD_socket b, const struct sockaddr *c, socklen_t d), (a, b, c, d))
LAZY(enum MHD_Result, MHD_add_response_header, (struct MHD_Response *a, const char *b, const char *c), (a, b, c))
LAZY(struct MHD_Response *, MHD_create_response_from_buffer, (size_t a, void *b, enum MHD_ResponseMemoryMode c), (a, b, c))
LAZY(struct MHD_Response *, MHD_create_response_from_buffer_with_free_callback_cls,
    (size_t a, void *b, MHD_ContentReaderFreeCallback c, void *d), (a, b, c, d))
LAZY(struct MHD_Response *, MHD_create_response_from_callback,
    (uint64_t a, size_t b, MHD_ContentReaderCallback c, void *d, MHD_ContentReaderFreeCallback e), (a, b, c, d, e))
LAZY(struct MHD_Response *, MHD_create_response_from_fd64, (uint64_t a, int b), (a, b))
LAZY(struct MHD_Response *, MHD_create_response_from_fd_at_offset64, (uint64_t a, int b, uint64_t c), (a, b, c))
LAZY_VOID(MHD_destroy_response, (struct MHD_Response *a), (a))
LAZY(int, MHD_get_connection_values,
    (struct MHD_Connection *a, enum MHD_ValueKind b, MHD_KeyValueIterator c, void *d), (a, b, c, d))
LAZY(const char *, MHD_lookup_connection_value, (struct MHD_Connection *a, enum MHD_ValueKind b, const char *c), (a, b, c))
LAZY(enum MHD_Result, MHD_queue_response, (struct MHD_Connection *a, unsigned int b, struct MHD_Response *c), (a, b, c))
LAZY_VOID(MHD_resume_connection, (struct MHD_Connection *a), (a))
LAZY_VOID(MHD_suspend_connection, (struct MHD_Connection *a), (a))
LAZY_VOID(MHD_stop_daemon, (struct MHD_Daemon *a), (a))

typedef struct MHD_Daemon *(*mhd_start_daemon_function)(
    unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *, MHD_AccessHandlerCallback, void *, ...);
typedef const union MHD_ConnectionInfo *(*mhd_get_connection_info_function)(
    struct MHD_Connection *, enum MHD_ConnectionInfoType, ...);

LAZY_POINTER(mhd_start_daemon_function, mhd_start_daemon, "MHD_start_daemon")

LAZY_POINTER(mhd_get_connection_info_function, mhd_get_connection_info, "MHD_get_connection_info")

// Leaves the request target exactly as the client sent it. MHD percent-decodes it by default,
// which would turn an encoded "/" into a real one and cut the path at an encoded NUL: docs/protocol.md#lookups wants
// both to be a miss, so the lookup decodes the path itself.
static size_t cmicrohttpd_keep_escapes(void *cls, struct MHD_Connection *connection, char *uri) {
    (void)cls;
    (void)connection;
    return strlen(uri);
}

struct MHD_Daemon *cmicrohttpd_start(const struct cmicrohttpd_config *config) {
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
    return mhd_start_daemon()(
        flags, 0, NULL, NULL, config->handler, config->handler_context, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

int cmicrohttpd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = mhd_get_connection_info()(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

void *cmicrohttpd_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = mhd_get_connection_info()(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

struct cmicrohttpd_field_count_state {
    const char *name;
    unsigned int count;
};

static enum MHD_Result cmicrohttpd_count_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    (void)value;
    struct cmicrohttpd_field_count_state *state = (struct cmicrohttpd_field_count_state *)cls;
    if (strcasecmp(key, state->name) == 0) state->count++;
    return MHD_YES;
}

unsigned int cmicrohttpd_field_count(struct MHD_Connection *connection, const char *name) {
    struct cmicrohttpd_field_count_state state = {name, 0};
    MHD_get_connection_values(connection, MHD_HEADER_KIND, cmicrohttpd_count_field, &state);
    return state.count;
}
