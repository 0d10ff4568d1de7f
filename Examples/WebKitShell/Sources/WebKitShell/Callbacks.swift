import CWebKitGTK
import Foundation

// WebKitGTK's callbacks, as plain functions: GTK calls them on its main thread, but top-level code in
// main.swift is isolated to the main actor, whose executor GTK's loop never drains (STYLE.md, C
// interop notes). Each finds the `Shell` through its user_data.

/// The `app://` URI-scheme handler.
func schemeRequest(_ request: UnsafeMutablePointer<WebKitURISchemeRequest>?, _ userData: gpointer?) {
    guard let request else { return }
    Shell.from(userData).answer(request)
}

/// "load-changed": print the title once a load finishes.
func loadChanged(_ view: UnsafeMutablePointer<WebKitWebView>?, _ event: WebKitLoadEvent, _ userData: gpointer?) {
    if event == WEBKIT_LOAD_FINISHED { Shell.from(userData).loadFinished() }
}

/// "notify::title": print the title whenever the page changes it.
func titleChanged(
    _ view: UnsafeMutablePointer<WebKitWebView>?, _ property: UnsafeMutablePointer<GParamSpec>?, _ userData: gpointer?
) {
    Shell.from(userData).printTitle()
}

/// webkit_web_view_get_snapshot's completion: WebKit has painted the page.
func snapshotReady(_ object: UnsafeMutablePointer<GObject>?, _ result: OpaquePointer?, _ userData: gpointer?) {
    Shell.from(userData).painted(result)
}

/// Runs on the main loop after an activation (`g_idle_add`): reload the page from the new set.
func reloadOnMainLoop(_ userData: gpointer?) -> gboolean {
    let shell = Shell.from(userData)
    if let view = shell.view { webkit_web_view_reload(view) }
    return 0  // G_SOURCE_REMOVE
}

/// Connects a GObject signal to a plain C function (`g_signal_connect` is a macro).
func connect(_ instance: gpointer, _ signal: String, _ handler: GCallback, _ userData: gpointer) {
    g_signal_connect_data(instance, signal, handler, userData, nil, GConnectFlags(rawValue: 0))
}
