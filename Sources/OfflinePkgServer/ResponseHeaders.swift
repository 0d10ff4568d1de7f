internal import CMicroHTTPD
import OfflinePkg

/// The headers every answer for a file carries, in one place for the cached and the per-request
/// responses.
enum ResponseHeaders {
    /// `Content-Type` and `Accept-Ranges`, for a response with the file's bytes.
    static func addContent(_ response: OpaquePointer, _ resource: Resource) {
        MHD_add_response_header(response, "Content-Type", resource.mimeType)
        MHD_add_response_header(response, "Accept-Ranges", "bytes")
    }

    /// `ETag` and `Cache-Control`, for every response about the file (200, 206, 304, 416).
    static func addValidators(_ response: OpaquePointer, _ resource: Resource) {
        MHD_add_response_header(response, "ETag", resource.etag)
        // The shell must revalidate (a cheap 304) so that a new active set shows at the next load.
        MHD_add_response_header(response, "Cache-Control", "no-cache")
    }
}
