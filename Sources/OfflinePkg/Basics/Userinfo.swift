import FoundationEssentials

/// A URL's `user:password@` part, which a root never keeps, reports or prints (docs/protocol.md#neighbours-on-the-device): no password
/// may sit in `state.json`, a status or a log. The transfer itself still sends it.
package enum Userinfo {
    /// `url` as text without its userinfo (`https://reader:secret@repo.example.com/` as
    /// `https://repo.example.com/`).
    package static func removed(from url: URL) -> String {
        guard url.user != nil || url.password != nil, var components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        else { return url.absoluteString }
        components.user = nil
        components.password = nil
        return components.string ?? url.absoluteString
    }

    /// The same for URL text (a state written before userinfo was left out); text that is not a URL as it is.
    package static func removed(from text: String) -> String {
        guard text.contains("@"), let url = URL(string: text) else { return text }
        return removed(from: url)
    }
}
