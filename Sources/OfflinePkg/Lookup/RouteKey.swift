/// The normalised form of a route prefix or a request URL: lowercase host, explicit port only when it
/// is not the scheme's default, then the path. `http` and `https` map to the same key (docs/protocol.md#lookups).
package enum RouteKey {
    /// The key of a route prefix such as `https://m.example.com/home/`, or nil if it is not an absolute
    /// http(s) URL. Routes are matched on decoded, dot-segment-free paths, so they are normalised alike.
    package static func normalized(_ route: String) -> String? {
        LookupURL.key(route)
    }

    /// What two routes are compared by when a manifest or a release says which package owns one: the
    /// normalised key, or the route as written when it is not an absolute http(s) URL (the manifest
    /// rules refuse such a route, so only an unchecked value ever compares that way).
    package static func owningKey(_ route: String) -> String {
        normalized(route) ?? route
    }
}
