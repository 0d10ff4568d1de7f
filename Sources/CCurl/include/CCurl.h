#ifndef OFFLINEPKG_CCURL_H
#define OFFLINEPKG_CCURL_H
#include <curl/curl.h>

// libcurl, loaded at the first transfer (CCurl.c): `lookup`, `status` and the other commands that
// fetch nothing never map it or the thirty libraries it needs.

// curl_easy_setopt and curl_easy_getinfo are C variadic functions, which Swift does not import.
// These typed wrappers give Swift one entry point per argument type.
CURLcode ccurl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode ccurl_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
CURLcode ccurl_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode ccurl_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode ccurl_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);

typedef size_t (*ccurl_data_callback)(char *data, size_t size, size_t count, void *context);
typedef int (*ccurl_xferinfo_callback)(void *context, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

CURLcode ccurl_setopt_data_callback(CURL *handle, CURLoption option, ccurl_data_callback callback);
CURLcode ccurl_setopt_xferinfo_callback(CURL *handle, ccurl_xferinfo_callback callback);

// libcurl calls this for each socket it is about to connect, with the address it will connect to: the
// one place to refuse an address whatever the name resolved to (CURLOPT_OPENSOCKETFUNCTION).
typedef curl_socket_t (*ccurl_opensocket_callback)(void *context, curlsocktype purpose, struct curl_sockaddr *address);
CURLcode ccurl_setopt_opensocket_callback(CURL *handle, ccurl_opensocket_callback callback);

// The address inside a struct curl_sockaddr (libcurl allocates room for a sockaddr_in6 behind it).
static inline const struct sockaddr *ccurl_sockaddr_address(const struct curl_sockaddr *address) {
    return &address->addr;
}

CURLcode ccurl_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode ccurl_getinfo_string(CURL *handle, CURLINFO info, char **value);
CURLcode ccurl_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value);
CURLcode ccurl_getinfo_pointer(CURL *handle, CURLINFO info, void **value);

// curl_multi_setopt is variadic too.
CURLMcode ccurl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

// CURLMsg's `data` is an anonymous union, which Swift reaches awkwardly: the fields a finished
// transfer needs.
CURL *ccurl_message_handle(const CURLMsg *message);
int ccurl_message_is_done(const CURLMsg *message);
CURLcode ccurl_message_result(const CURLMsg *message);
#endif
