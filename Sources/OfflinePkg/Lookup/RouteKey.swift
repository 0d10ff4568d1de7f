/// The normalised form of a route prefix or a request URL: lowercase host, explicit port only when it
/// is not the scheme's default, then the path. `http` and `https` map to the same key (SPEC §7).
package enum RouteKey {
    /// The key of a route prefix such as `https://m.example.com/home/`, or nil if it is not an absolute
    /// http(s) URL. Routes are matched on decoded, dot-segment-free paths, so they are normalised alike.
    package static func normalized(_ route: String) -> String? {
        LookupURL.key(route)
    }
}
