// WebKitShell <manifest-url> <page-url> [--root DIR] [--interval S] [--trust-key F] [--page-file PATH]
//
// A host shell as README.md ("Connecting a webview") describes it: a WebKitGTK web view that loads an https route of an offline
// package through an in-process URI-scheme handler (`app://`, registered as secure, so the page is a
// secure context), prints `title: <document.title>` after each load and title change, syncs in the
// background every S seconds and reloads the page on each activation.
//
// `--page-file PATH` loads PATH from file:// instead, without opening the store: the same shell and
// page with no offlinepkg at all, the floor that the `frame` row of Benchmarks/bench measures the
// packaged page's first painted frame against.
import CWebKitGTK
import Foundation
import OfflinePkg

let launchedAt = Shell.processStart()

func log(_ message: String) { FileHandle.standardError.write(Data("WebKitShell: \(message)\n".utf8)) }

func fail(_ message: String, status: Int32 = 2) -> Never {
    FileHandle.standardError.write(Data("WebKitShell: \(message)\n".utf8))
    exit(status)
}

var positional = [String]()
var root = CacheLayout.defaultRoot(environment: ProcessInfo.processInfo.environment)
var interval: TimeInterval = 3600
var keys = [TrustedKey]()
var pageFile: String?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--root":
        guard let folder = arguments.popFirst() else { fail("--root needs a folder") }
        root = folder
    case "--interval":
        guard let text = arguments.popFirst(), let seconds = TimeInterval(text), seconds > 0 else {
            fail("--interval needs a number of seconds above 0")
        }
        interval = seconds
    case "--page-file":
        guard let path = arguments.popFirst() else { fail("--page-file needs a file") }
        pageFile = path
    case "--trust-key":
        guard let path = arguments.popFirst() else { fail("--trust-key needs a file") }
        do { keys.append(try TrustedKey(contentsOfFile: path)) } catch { fail("\(error)", status: 4) }
    default:
        if argument.hasPrefix("--") { fail("unknown option \(argument)") }
        positional.append(argument)
    }
}
guard positional.count == 2 else {
    fail("usage: WebKitShell <manifest-url> <page-url> [--root DIR] [--interval S] [--trust-key F] [--page-file PATH]")
}
guard var page = URLComponents(string: positional[1]), page.scheme == "https" else {
    fail("page-url must be an https URL of a route, got \(positional[1])")
}

// The web view sees app://m.example.com/...; the store resolves it as https://m.example.com/...
let scheme = "app"
var opened: (store: PackageStore, updater: Updater)?
if pageFile == nil {
    do {
        let store = try PackageStore(root: URL(fileURLWithPath: root), options: .init(customSchemes: [scheme: "https"]))
        let updater = Updater(
            store: store, manifestURL: try ManifestLocation.url(from: positional[0]),
            options: .init(trustedKeys: keys, minInterval: interval))
        // resolve answers nil until the first sync: a first launch waits for one.
        if store.activeSet.packages.isEmpty { _ = try await updater.sync() }
        opened = (store, updater)
    } catch {
        fail("\(error)", status: 1)
    }
}
let shell = Shell(store: opened?.store, scheme: scheme, launchedAt: launchedAt)

if let (store, updater) = opened {
    // Background updates every `interval` seconds. Updater.start() keeps at least a minute between
    // syncs; this loop lets a test use seconds. Detached, and given copies of what it reads: the main
    // thread belongs to GTK's loop, so anything that hops to the main actor (a top-level `var`) would
    // never run.
    Task.detached { [interval] in
        while true {
            try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
            do {
                let report = try await updater.sync()
                if report.outcome == .activated { log("background sync activated set \(report.generation)") }
            } catch {
                log("background sync failed: \(error)")
            }
        }
    }
    // Each activation (this loop's syncs, or a cron sync in another process) reloads the page.
    Task.detached {
        for await set in store.activations {
            log("set \(set.generation) is active: reloading")
            g_idle_add(reloadOnMainLoop, shell.pointer)
        }
    }
}

gtk_init(nil, nil)
let context = webkit_web_context_get_default()
webkit_web_context_register_uri_scheme(context, scheme, schemeRequest, shell.pointer, nil)
let security = webkit_web_context_get_security_manager(context)
webkit_security_manager_register_uri_scheme_as_secure(security, scheme)
webkit_security_manager_register_uri_scheme_as_cors_enabled(security, scheme)

let window = gtk_window_new(GTK_WINDOW_TOPLEVEL)!
gtk_window_set_default_size(cwebkitgtk_window(window), 800, 600)
let viewWidget = webkit_web_view_new_with_context(context)!
if pageFile != nil {
    // The page's own fetch of data.json works from file:// as it does through the scheme.
    webkit_settings_set_allow_file_access_from_file_urls(webkit_web_view_get_settings(cwebkitgtk_web_view(viewWidget)), 1)
}
let view = cwebkitgtk_web_view(viewWidget)!
shell.view = view
connect(
    view, "load-changed",
    unsafeBitCast(
        loadChanged as @convention(c) (UnsafeMutablePointer<WebKitWebView>?, WebKitLoadEvent, gpointer?) -> Void,
        to: GCallback.self), shell.pointer)
connect(
    view, "notify::title",
    unsafeBitCast(
        titleChanged
            as @convention(c) (UnsafeMutablePointer<WebKitWebView>?, UnsafeMutablePointer<GParamSpec>?, gpointer?) -> Void,
        to: GCallback.self), shell.pointer)
gtk_container_add(cwebkitgtk_container(window), viewWidget)
gtk_widget_show_all(window)

if let pageFile {
    webkit_web_view_load_uri(view, URL(fileURLWithPath: pageFile).absoluteString)
} else {
    page.scheme = scheme
    webkit_web_view_load_uri(view, page.string)
}
gtk_main()
