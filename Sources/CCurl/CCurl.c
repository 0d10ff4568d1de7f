// libcurl's functions as lazy stubs (CSystemShims.h says how), and the typed wrappers of its three
// variadic ones, which call the real function through a pointer of its variadic type.
#include "CCurl.h"
// The soname Debian's libcurl4 (OpenSSL flavour) installs; the ABI it names has not changed since 2006.
#define CSYSTEMSHIMS_SONAME "libcurl.so.4"
// Its tree of some thirty libraries binds within itself, as in curl's own process (CSystemShims.h).
#define CSYSTEMSHIMS_OWN_SCOPE 1
#include "CSystemShims.h"

LAZY(CURLcode, curl_global_init, (long flags), (flags))
LAZY(CURL *, curl_easy_init, (void), ())
LAZY(CURLcode, curl_easy_perform, (CURL *handle), (handle))
LAZY_VOID(curl_easy_cleanup, (CURL *handle), (handle))
LAZY(const char *, curl_easy_strerror, (CURLcode code), (code))
LAZY(struct curl_slist *, curl_slist_append, (struct curl_slist *list, const char *text), (list, text))
LAZY_VOID(curl_slist_free_all, (struct curl_slist *list), (list))
LAZY(CURLM *, curl_multi_init, (void), ())
LAZY(CURLMcode, curl_multi_cleanup, (CURLM *multi), (multi))
LAZY(CURLMcode, curl_multi_add_handle, (CURLM *multi, CURL *handle), (multi, handle))
LAZY(CURLMcode, curl_multi_remove_handle, (CURLM *multi, CURL *handle), (multi, handle))
LAZY(CURLMcode, curl_multi_perform, (CURLM *multi, int *running), (multi, running))
LAZY(CURLMcode, curl_multi_poll, (CURLM *multi, struct curl_waitfd extra[], unsigned int count, int timeout, int *ready),
     (multi, extra, count, timeout, ready))
LAZY(CURLMcode, curl_multi_wakeup, (CURLM *multi), (multi))
LAZY(CURLMsg *, curl_multi_info_read, (CURLM *multi, int *left), (multi, left))

typedef CURLcode (*ccurl_setopt_function)(CURL *, CURLoption, ...);
typedef CURLcode (*ccurl_getinfo_function)(CURL *, CURLINFO, ...);
typedef CURLMcode (*ccurl_multi_setopt_function)(CURLM *, CURLMoption, ...);

LAZY_POINTER(ccurl_setopt_function, ccurl_setopt, "curl_easy_setopt")

LAZY_POINTER(ccurl_getinfo_function, ccurl_getinfo, "curl_easy_getinfo")

LAZY_POINTER(ccurl_multi_setopt_function, ccurl_multi_setopt, "curl_multi_setopt")

CURLcode ccurl_setopt_long(CURL *handle, CURLoption option, long value) {
    return ccurl_setopt()(handle, option, value);
}

CURLcode ccurl_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return ccurl_setopt()(handle, option, value);
}

CURLcode ccurl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return ccurl_setopt()(handle, option, value);
}

CURLcode ccurl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return ccurl_setopt()(handle, option, value);
}

CURLcode ccurl_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return ccurl_setopt()(handle, option, value);
}

CURLcode ccurl_setopt_data_callback(CURL *handle, CURLoption option, ccurl_data_callback callback) {
    return ccurl_setopt()(handle, option, callback);
}

CURLcode ccurl_setopt_xferinfo_callback(CURL *handle, ccurl_xferinfo_callback callback) {
    return ccurl_setopt()(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

CURLcode ccurl_setopt_opensocket_callback(CURL *handle, ccurl_opensocket_callback callback) {
    return ccurl_setopt()(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

CURLcode ccurl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return ccurl_getinfo()(handle, info, value);
}

CURLcode ccurl_getinfo_string(CURL *handle, CURLINFO info, char **value) {
    return ccurl_getinfo()(handle, info, value);
}

CURLcode ccurl_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return ccurl_getinfo()(handle, info, value);
}

CURLcode ccurl_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return ccurl_getinfo()(handle, info, value);
}

CURLMcode ccurl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return ccurl_multi_setopt()(multi, option, value);
}

CURL *ccurl_message_handle(const CURLMsg *message) { return message->easy_handle; }
int ccurl_message_is_done(const CURLMsg *message) { return message->msg == CURLMSG_DONE; }
CURLcode ccurl_message_result(const CURLMsg *message) { return message->data.result; }
