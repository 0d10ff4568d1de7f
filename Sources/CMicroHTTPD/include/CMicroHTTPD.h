#ifndef OFFLINEPKG_CMICROHTTPD_H
#define OFFLINEPKG_CMICROHTTPD_H
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

// libmicrohttpd, loaded when `serve` starts a daemon (CMicroHTTPD.c): no other command maps it or
// GnuTLS and the libraries that one needs.

// MHD_start_daemon and MHD_get_connection_info are variadic, which Swift does not import; these
// wrappers (in CMicroHTTPD.c) fix the options the loopback server uses, so Swift never builds a
// va_list of mixed integers, pointers and function pointers by hand.

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

struct MHD_Daemon *cmicrohttpd_start(const struct cmicrohttpd_config *config);

// The connection's socket, or -1.
int cmicrohttpd_connection_fd(struct MHD_Connection *connection);

// What the connection notifier stored for this connection, or NULL.
void *cmicrohttpd_socket_context(struct MHD_Connection *connection);

// How many header fields named `name` (case-insensitively) the request has: MHD's lookup returns
// only the first, and two Host fields must be refused, not resolved by the first.
unsigned int cmicrohttpd_field_count(struct MHD_Connection *connection, const char *name);

#endif
