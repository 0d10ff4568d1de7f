#ifndef WEBKITSHELL_CWEBKITGTK_SHIM_H
#define WEBKITSHELL_CWEBKITGTK_SHIM_H
#include <webkit2/webkit2.h>

// GTK_WINDOW(), WEBKIT_WEB_VIEW() and the like are cast macros Swift does not import; these
// functions do the same casts, typed.
static inline GtkWindow *cwebkitgtk_window(GtkWidget *widget) { return GTK_WINDOW(widget); }
static inline GtkContainer *cwebkitgtk_container(GtkWidget *widget) { return GTK_CONTAINER(widget); }
static inline WebKitWebView *cwebkitgtk_web_view(GtkWidget *widget) { return WEBKIT_WEB_VIEW(widget); }
#endif
