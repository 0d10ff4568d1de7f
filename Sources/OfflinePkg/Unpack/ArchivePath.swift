/// The path rules of docs/protocol.md#archives for archive members, shared by unpacking, deltas, publishing and manifest
/// fields. Paths are byte strings: every rule is checked on the bytes, never on `String` characters.
package enum ArchivePath {
    /// The root member of a delta archive; refused anywhere else.
    package static let deltaControlName = ".offlinepkg-delta.json"
    package static let deltaControlPath = PackagePath(deltaControlName)

    /// Normalises a member path: drops a leading `./` and `.` segments and a trailing `/`.
    /// Returns the clean relative path (empty for the archive root itself), or why it is refused.
    package static func normalize(_ raw: [UInt8]) -> Normalized {
        if raw.isEmpty { return .failure("empty path") }
        if let reason = nameProblem(raw) { return .failure(reason) }
        if raw.first == UInt8(ascii: "/") { return .failure("absolute path") }
        if raw.contains(UInt8(ascii: "\\")) { return .failure("backslash in path") }
        var segments = raw.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        if segments.last?.isEmpty == true { segments.removeLast() }  // a folder's trailing slash
        var clean = [UInt8]()
        for segment in segments {
            if segment.elementsEqual([UInt8(ascii: ".")]) { continue }
            if segment.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) { return .failure("\"..\" segment in path") }
            if segment.isEmpty { return .failure("empty segment in path") }
            if !clean.isEmpty { clean.append(UInt8(ascii: "/")) }
            clean.append(contentsOf: segment)
        }
        return .success(PackagePath(bytes: clean))
    }

    package static func normalize(_ raw: String) -> Normalized {
        normalize(Array(raw.utf8))
    }

    /// Why these bytes cannot be a name at all, or nil: a NUL, a control character (C0, DEL, or C1
    /// written as UTF-8, U+0080–U+009F), or bytes that are not valid UTF-8.
    package static func nameProblem(_ bytes: [UInt8]) -> String? {
        if bytes.contains(0) { return "NUL byte in path" }
        if bytes.contains(where: { $0 < 0x20 || $0 == 0x7f }) { return "control character in path" }
        guard let text = String(validating: bytes, as: UTF8.self) else { return "name is not valid UTF-8" }
        if text.unicodeScalars.contains(where: { (0x80...0x9f).contains($0.value) }) { return "control character in path" }
        return nil
    }

    package enum Normalized: Equatable {
        case success(PackagePath)
        case failure(String)
    }

    /// Why `path` is not a clean relative file path inside a package, or nil when it is one.
    package static func validate(_ path: [UInt8]) -> String? {
        switch normalize(path) {
        case .failure(let reason): reason
        case .success(let clean): clean.isEmpty ? "empty path" : (clean.bytes == path ? nil : "not in normal form")
        }
    }

    package static func validate(_ path: String) -> String? {
        validate(Array(path.utf8))
    }
}
