import CWebKitGTK
import Foundation
import OfflinePkg

#if canImport(Glibc)
import Glibc
#endif

/// What the WebKitGTK callbacks reach through their `user_data`: the store that answers the scheme
/// handler and the web view to reload. Created once, kept for the life of the process.
final class Shell: @unchecked Sendable {
    // @unchecked: `view` is set once on the main thread before any callback runs and only used there
    // (GTK is single-threaded); `store` is Sendable. No store: the page comes from file:// (`--page-file`).
    let store: PackageStore?
    /// The custom scheme the page is loaded under (`app`), mapped to https by `customSchemes`.
    let scheme: String
    var view: UnsafeMutablePointer<WebKitWebView>?
    /// Process start, to report the time from launch to the first finished load.
    let launchedAt: Double
    var firstLoadReported = false

    init(store: PackageStore?, scheme: String, launchedAt: Double) {
        self.store = store
        self.scheme = scheme
        self.launchedAt = launchedAt
    }

    var pointer: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    static func from(_ pointer: UnsafeMutableRawPointer?) -> Shell {
        Unmanaged<Shell>.fromOpaque(pointer!).takeUnretainedValue()
    }

    /// Answers one request of the web view from the active set: a hit with its bytes and type, a miss
    /// with a 404 page (this shell has no network fallback).
    func answer(_ request: UnsafeMutablePointer<WebKitURISchemeRequest>) {
        let uri = String(cString: webkit_uri_scheme_request_get_uri(request))
        let status: UInt32
        let type: String
        let body: Data
        do {
            if let (resource, bytes) = try store?.data(for: uri) {
                (status, type, body) = (200, resource.mimeType, bytes)
            } else {
                (status, type, body) = (404, "text/plain; charset=utf-8", Data("not offline: \(uri)\n".utf8))
            }
        } catch {
            (status, type, body) = (500, "text/plain; charset=utf-8", Data("cannot read \(uri): \(error)\n".utf8))
        }
        let bytes = body.withUnsafeBytes { g_bytes_new($0.baseAddress, gsize($0.count)) }
        let stream = g_memory_input_stream_new_from_bytes(bytes)
        g_bytes_unref(bytes)
        let response = webkit_uri_scheme_response_new(stream, gint64(body.count))
        g_object_unref(stream)
        webkit_uri_scheme_response_set_status(response, guint(status), nil)
        webkit_uri_scheme_response_set_content_type(response, type)
        webkit_uri_scheme_request_finish_with_response(request, response)
        g_object_unref(response)
    }

    func printTitle() {
        guard let view, let title = webkit_web_view_get_title(view) else { return }
        // Unbuffered, one write per line: the test reading the pipe sees each title at once.
        FileHandle.standardOutput.write(Data("title: \(String(cString: title))\n".utf8))
    }

    func loadFinished() {
        printTitle()
        if !firstLoadReported, let view {
            firstLoadReported = true
            let milliseconds = (Shell.secondsSinceBoot() - launchedAt) * 1000
            FileHandle.standardError.write(Data("first load finished \(Int(milliseconds)) ms after launch\n".utf8))
            // A snapshot of the visible area is ready once WebKit has painted a frame of the page: the
            // launch → first paint figure, and a check that what was painted is the page.
            webkit_web_view_get_snapshot(
                view, WEBKIT_SNAPSHOT_REGION_VISIBLE, WEBKIT_SNAPSHOT_OPTIONS_NONE, nil, snapshotReady, pointer)
        }
    }

    /// Reports the first painted frame: milliseconds since launch and the colour of the pixel near the
    /// bottom-right corner (the page's background there).
    func painted(_ result: OpaquePointer?) {
        let milliseconds = (Shell.secondsSinceBoot() - launchedAt) * 1000
        guard let view, let surface = webkit_web_view_get_snapshot_finish(view, result, nil) else {
            FileHandle.standardError.write(Data("first paint: no snapshot\n".utf8))
            return
        }
        defer { cairo_surface_destroy(surface) }
        var colour = "unknown"
        let width = cairo_image_surface_get_width(surface)
        let height = cairo_image_surface_get_height(surface)
        if let data = cairo_image_surface_get_data(surface), width > 8, height > 8 {
            // CAIRO_FORMAT_ARGB32/RGB24: one native-endian 32-bit word per pixel, 0xAARRGGBB.
            let stride = Int(cairo_image_surface_get_stride(surface))
            let offset = (Int(height) - 5) * stride + (Int(width) - 5) * 4
            let pixel = UnsafeRawPointer(data + offset).loadUnaligned(as: UInt32.self)
            colour = String(format: "#%06x", pixel & 0xffffff)
        }
        FileHandle.standardError.write(
            Data("first paint \(Int(milliseconds)) ms after launch (\(width)x\(height), background \(colour))\n".utf8))
    }

    /// Seconds since boot now (CLOCK_BOOTTIME), the clock /proc/self/stat's start time is on.
    static func secondsSinceBoot() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_BOOTTIME, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// When this process started, in seconds since boot (field 22 of /proc/self/stat, in clock ticks).
    static func processStart() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return secondsSinceBoot() }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the ")" come field 3 (state) onwards: start time is field 22.
        guard fields.count > 19, let ticks = Double(fields[19]) else { return secondsSinceBoot() }
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
