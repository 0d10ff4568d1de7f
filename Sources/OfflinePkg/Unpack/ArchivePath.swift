/// The path rules of SPEC §3 for archive members, shared by unpacking, deltas and manifest fields.
package enum ArchivePath {
    /// The root member of a delta archive; refused anywhere else.
    package static let deltaControlName = ".offlinepkg-delta.json"

    /// Normalises a member path: drops a leading `./` and `.` segments and a trailing `/`.
    /// Returns the clean relative path (empty for the archive root itself), or why it is refused.
    package static func normalize(_ raw: String) -> Normalized {
        let bytes = Array(raw.utf8)
        if bytes.isEmpty { return .failure("empty path") }
        if bytes.first == UInt8(ascii: "/") { return .failure("absolute path") }
        if bytes.contains(UInt8(ascii: "\\")) { return .failure("backslash in path") }
        if bytes.contains(where: { $0 < 0x20 || $0 == 0x7f }) { return .failure("control character in path") }
        var segments = raw.split(separator: "/", omittingEmptySubsequences: false)
        if segments.last == "" { segments.removeLast() }  // a folder's trailing slash
        var clean = [Substring]()
        for segment in segments {
            switch segment {
            case ".": continue
            case "..": return .failure("\"..\" segment in path")
            case "": return .failure("empty segment in path")
            default: clean.append(segment)
            }
        }
        return .success(clean.joined(separator: "/"))
    }

    package enum Normalized: Equatable {
        case success(String)
        case failure(String)
    }

    /// Why `path` is not a clean relative file path inside a package, or nil when it is one.
    package static func validate(_ path: String) -> String? {
        switch normalize(path) {
        case .failure(let reason): reason
        case .success(let clean): clean.isEmpty ? "empty path" : (clean == path ? nil : "not in normal form")
        }
    }
}
