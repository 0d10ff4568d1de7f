/// `PackageStore.Options.customSchemes`: a shell's own URL schemes (`app://`) mapped to the http(s)
/// URL a route names, so a scheme handler can resolve the URL it is given as it is.
struct CustomSchemes: Sendable {
    /// Lowercased custom scheme → `http` or `https`.
    private let mapping: [String: String]

    init(_ mapping: [String: String]) throws {
        var lowered = [String: String]()
        for (scheme, target) in mapping {
            let name = scheme.lowercased()
            let target = target.lowercased()
            guard let first = name.utf8.first, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first),
                name.utf8.allSatisfy({ Self.isSchemeByte($0) })
            else {
                throw OfflinePkgError.invalidArgument(
                    "custom scheme \"\(scheme)\" is not a URL scheme (a letter, then letters, digits, +, - or .)")
            }
            guard target == "http" || target == "https" else {
                throw OfflinePkgError.invalidArgument("custom scheme \(scheme) maps to \"\(target)\": expected http or https")
            }
            guard name != "http" && name != "https" else {
                throw OfflinePkgError.invalidArgument(
                    "custom scheme \(scheme) cannot be remapped: http and https resolve as themselves")
            }
            lowered[name] = target
        }
        self.mapping = lowered
    }

    var isEmpty: Bool { mapping.isEmpty }

    /// `url` with its custom scheme replaced, or nil when its scheme is not one of the mapping's.
    func rewrite(_ url: String) -> String? {
        guard let colon = url.utf8.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let scheme = String(url[..<colon]).lowercased()
        guard let target = mapping[scheme] else { return nil }
        return target + url[colon...]
    }

    private static func isSchemeByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"),
            UInt8(ascii: "-"), UInt8(ascii: "."):
            true
        default: false
        }
    }
}
