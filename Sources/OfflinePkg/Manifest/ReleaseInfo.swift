import FoundationEssentials

/// The release fields of a package entry that only inform the shell (docs/protocol.md#package-entries): `notes` and
/// `mandatory`. Kept apart from the rest of the parser so it reads two values and nothing else.
package enum ReleaseInfo {
    /// Notes longer than this are refused: a manifest is fetched by every device at every check.
    package static let maximumNotesBytes = 16 << 10

    /// `notes`: an optional string; `mandatory`: an optional boolean (absent means false).
    package static func read(notes: JSONValue?, mandatory: JSONValue?, at field: String, source: String) throws -> (
        String?, Bool
    ) {
        func fail(_ name: String, _ reason: String) -> OfflinePkgError {
            .invalidManifest(source: source, field: "\(field).\(name)", reason: reason)
        }
        var text: String?
        if let notes, !notes.isNull {
            guard let value = notes.string else { throw fail("notes", "expected a string") }
            guard value.utf8.count <= maximumNotesBytes else {
                throw fail("notes", "longer than \(maximumNotesBytes) bytes (\(value.utf8.count))")
            }
            text = value
        }
        var flag = false
        if let mandatory, !mandatory.isNull {
            guard let value = mandatory.boolean else { throw fail("mandatory", "expected true or false") }
            flag = value
        }
        return (text, flag)
    }
}
