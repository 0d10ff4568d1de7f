import FoundationEssentials

/// The root member `.offlinepkg-delta.json` of a delta archive (docs/protocol.md#deltas): which version it applies to,
/// which it produces, and the files of `from` that `to` no longer has.
package struct DeltaControl: Codable, Sendable, Equatable {
    package var from: String
    package var to: String
    package var delete: [String]

    package init(from: String, to: String, delete: [String]) {
        self.from = from
        self.to = to
        self.delete = delete
    }

    /// Sorted keys, no spaces: the same delta always has the same bytes.
    package func encoded() -> [UInt8] {
        JSONCoding.encode(self, pretty: false)
    }

    /// Parses and checks a control member: versions as the manifest names them, and every path to
    /// delete a clean relative path (no `..`, no absolute path, no reserved name), listed once.
    package static func decode(_ bytes: [UInt8], archive: String) throws -> DeltaControl {
        func refuse(_ reason: String) -> OfflinePkgError {
            .archiveRefused(archive: archive, entry: ArchivePath.deltaControlPath, reason: reason)
        }
        let control: DeltaControl
        do {
            control = try JSONDecoder().decode(DeltaControl.self, from: Data(bytes))
        } catch {
            throw refuse("expected {\"from\", \"to\", \"delete\": [...]}")
        }
        var seen = Set<PackagePath>()
        for path in control.delete {
            if let reason = ArchivePath.validate(path) { throw refuse("delete \"\(path)\": \(reason)") }
            if path == ArchivePath.deltaControlName { throw refuse("delete \"\(path)\": reserved name") }
            guard seen.insert(PackagePath(path)).inserted else { throw refuse("delete \"\(path)\" listed twice") }
        }
        return control
    }
}
