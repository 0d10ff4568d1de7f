import OfflinePkg
import FoundationEssentials

/// A repository's `manifest.json` as a JSON document, edited in place: `publish` replaces one package
/// and the sequence, and keeps every other value — fields this build does not know included — as it
/// was, so a manifest that other tools (or a newer offlinepkg) write survives a publish.
package struct ManifestDocument {
    private var object: [String: Any]
    /// The validated reading of the same bytes (nil for a repository without a manifest yet).
    private let parsed: Manifest?

    package static func load(_ path: String) throws -> ManifestDocument {
        guard FileSystem.exists(path) else {
            return ManifestDocument(
                object: ["format": Manifest.supportedFormat, "sequence": 0, "packages": [Any]()], parsed: nil)
        }
        let bytes = try FileSystem.read(path, limit: Manifest.maximumSize)
        // Publishing on top of a manifest devices would refuse would only hide the problem.
        let parsed = try Manifest(parsing: bytes, source: path)
        // The strict parser has just read the same bytes as a manifest: this reading cannot fail.
        guard let object = try? JSONTree.parse(bytes) as? [String: Any] else {
            throw OfflinePkgError.invalidManifest(source: path, field: "(document)", reason: "expected a JSON object")
        }
        return ManifestDocument(object: object, parsed: parsed)
    }

    package var sequence: Int { parsed?.sequence ?? 0 }

    package func package(_ id: String) -> PackageEntry? { parsed?.packages.first { $0.id == id } }

    /// Refuses a route that another package of the manifest already lists (compared as devices compare
    /// them: scheme and host case-insensitively, default ports dropped).
    package func checkRoutes(_ routes: [String], for id: String) throws {
        for other in parsed?.packages ?? [] where other.id != id {
            let owned = Set(other.routes.map(RouteKey.owningKey))
            for route in routes where owned.contains(RouteKey.owningKey(route)) {
                throw OfflinePkgError.publishRefused(reason: "route \(route) belongs to package \"\(other.id)\"")
            }
        }
    }

    /// Sets or (nil) removes `expires`: an expiry applies to the publish that asked for it only.
    package mutating func setExpires(_ date: Date?) {
        object["expires"] = date.map(RFC3339.format)
    }

    /// The package's entry as the manifest's JSON holds it, fields this build does not know included.
    package func packageObject(_ id: String) -> [String: Any]? {
        (object["packages"] as? [Any])?.lazy.compactMap { $0 as? [String: Any] }.first { $0["id"] as? String == id }
    }

    /// Sets the `runtime` object (docs/protocol.md#the-runtime-object); a publish that names none keeps the one there.
    package mutating func setRuntime(_ runtime: RuntimeConfiguration) {
        object["runtime"] = runtime.jsonObject
    }

    /// Sets or (nil) removes the `reports` object (docs/protocol.md#install-reports); a publish that names neither keeps it.
    package mutating func setReports(_ url: String?) {
        object["reports"] = url.map { ["url": $0] }
    }

    /// Takes the package out of the manifest (`remove`); false when it was not in it.
    @discardableResult
    package mutating func removePackage(_ id: String) -> Bool {
        guard var packages = object["packages"] as? [Any],
            let index = packages.firstIndex(where: { ($0 as? [String: Any])?["id"] as? String == id })
        else { return false }
        packages.remove(at: index)
        object["packages"] = packages
        return true
    }

    /// Sets or (nil) removes `keys`, the keys version the manifest is signed under
    /// (docs/protocol.md#keys-documents).
    package mutating func setKeysVersion(_ version: Int?) {
        object["keys"] = version
    }

    package mutating func setSequence(_ sequence: Int) {
        object["sequence"] = sequence
        if object["format"] == nil { object["format"] = Manifest.supportedFormat }
    }

    /// Puts `entry` where the package was (or at the end): the publisher owns its package's object whole.
    package mutating func replacePackage(_ entry: PackageEntry) {
        replacePackage(object: Self.json(entry), id: entry.id)
    }

    /// Puts a package entry given as JSON (a promoted one, copied whole) where the package was.
    package mutating func replacePackage(object value: [String: Any], id: String) {
        var packages = object["packages"] as? [Any] ?? []
        if let index = packages.firstIndex(where: { ($0 as? [String: Any])?["id"] as? String == id }) {
            packages[index] = value
        } else {
            packages.append(value)
        }
        object["packages"] = packages
    }

    package func encoded() throws -> [UInt8] {
        JSONTree.encode(object, pretty: true) + [0x0a]
    }

    package static func json(_ entry: PackageEntry) -> [String: Any] {
        func file(_ file: RemoteFile) -> [String: Any] { ["url": file.url, "sha256": file.sha256, "size": Int(file.size)] }
        var object: [String: Any] = [
            "id": entry.id, "version": entry.version, "routes": entry.routes, "entry": entry.entry,
            "archive": file(entry.archive), "tree": entry.tree,
        ]
        if let files = entry.archive.files {
            object["archive"] = file(entry.archive).merging([
                "files": file(RemoteFile(url: files.url, sha256: files.sha256, size: files.size))
            ]) { $1 }
        }
        if let fallback = entry.fallback { object["fallback"] = fallback }
        if !entry.deltas.isEmpty {
            object["deltas"] = entry.deltas.map { delta -> [String: Any] in
                var value = file(delta.file)
                value["from"] = delta.from
                return value
            }
        }
        if let minShellVersion = entry.minShellVersion { object["minShellVersion"] = minShellVersion }
        if let maxShellVersion = entry.maxShellVersion { object["maxShellVersion"] = maxShellVersion }
        if entry.disabled { object["disabled"] = true }
        if let rollout = entry.rollout { object["rollout"] = rollout }
        if let notes = entry.notes { object["notes"] = notes }
        if entry.mandatory { object["mandatory"] = true }
        if let unpackedSize = entry.unpackedSize { object["unpackedSize"] = Int(unpackedSize) }
        return object
    }
}
