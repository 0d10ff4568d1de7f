import FoundationEssentials

extension Manifest {
    /// Parses and validates manifest bytes; `source` names the manifest in error messages.
    package init(parsing bytes: [UInt8], source: String) throws {
        guard bytes.count <= Manifest.maximumSize else {
            throw OfflinePkgError.sizeMismatch(what: "manifest \(source)", reason: "larger than \(Manifest.maximumSize) bytes")
        }
        let document: JSONDocument
        do {
            document = try JSONDocument(parsing: bytes)
        } catch {
            throw OfflinePkgError.invalidManifest(
                source: source, field: error.path.isEmpty ? "(document)" : error.path, reason: error.reason)
        }
        var reader = ManifestReader(source: source)
        self = try reader.manifest(from: document.root)
    }
}

/// Walks the JSON tree and checks every rule of docs/protocol.md#the-manifest, naming the field of each failure.
private struct ManifestReader: StrictFieldReader {
    let source: String

    func fail(_ field: String, _ reason: String) -> OfflinePkgError {
        .invalidManifest(source: source, field: field, reason: reason)
    }

    mutating func manifest(from root: JSONValue) throws -> Manifest {
        guard let object = root.object else { throw fail("(document)", "expected a JSON object") }
        let format = try integer(object["format"], "format", required: true)!
        if format > Manifest.supportedFormat {
            throw OfflinePkgError.manifestFormatTooNew(source: source, format: format)
        }
        guard format == Manifest.supportedFormat else { throw fail("format", "must be 1, got \(format)") }
        let sequence = try integer(object["sequence"], "sequence", required: true)!
        guard sequence >= 1 else { throw fail("sequence", "must be at least 1, got \(sequence)") }
        var expires: Date?
        if let text = try string(object["expires"], "expires", required: false) {
            guard let date = RFC3339.parse(text) else {
                throw fail("expires", "expected an RFC 3339 time such as 2027-01-31T00:00:00Z, got \(quoted(text))")
            }
            expires = date
        }
        guard let list = object["packages"]?.array else { throw fail("packages", "expected a list") }
        var packages = [PackageEntry]()
        var ids = Set<String>()
        var routeOwners = [String: String]()
        for (index, item) in list.enumerated() {
            let package = try self.package(from: item, field: "packages[\(index)]")
            guard ids.insert(package.id).inserted else {
                throw fail("packages[\(index)].id", "duplicate package id \"\(package.id)\"")
            }
            for route in package.routes {
                let key = RouteKey.owningKey(route)
                if let owner = routeOwners[key] {
                    throw fail("packages[\(index)].routes", "route \(route) is already listed by package \"\(owner)\"")
                }
                routeOwners[key] = package.id
            }
            packages.append(package)
        }
        var manifest = Manifest(sequence: sequence, expires: expires, packages: packages)
        // docs/protocol.md#keys-documents: the keys version the manifest is signed under.
        if let keys = try integer(object["keys"], "keys", required: false) {
            guard keys >= 1 else { throw fail("keys", "must be a keys version of at least 1, got \(keys)") }
            manifest.keysVersion = keys
        }
        if let runtime = object["runtime"], !runtime.isNull {
            manifest.runtime = try RuntimeConfiguration(json: runtime, source: source)
        }
        if let reports = object["reports"], !reports.isNull {
            guard let fields = reports.object else { throw fail("reports", "expected an object with a url, got \(describe(reports))") }
            let url = try string(fields["url"], "reports.url", text: .identifier)!
            if let problem = ManifestRules.reportsURLProblem(url) { throw fail("reports.url", "\(quoted(url)) \(problem)") }
            manifest.reportsURL = url
        }
        return manifest
    }

    func package(from value: JSONValue, field: String) throws -> PackageEntry {
        guard let object = value.object else { throw fail(field, "expected an object") }
        let id = try string(object["id"], "\(field).id", text: .identifier)!
        guard ManifestRules.isValidID(id) else {
            throw fail("\(field).id", "\(quoted(id)) must match \(ManifestRules.idPattern)")
        }
        let at = "\(field) (\(id))"
        let version = try string(object["version"], "\(at).version", text: .identifier)!
        guard ManifestRules.isValidVersion(version) else {
            throw fail("\(at).version", "\(quoted(version)) must match \(ManifestRules.versionPattern)")
        }
        guard let routeList = object["routes"]?.array, !routeList.isEmpty else {
            throw fail("\(at).routes", "expected a non-empty list of URL prefixes")
        }
        var routes = [String]()
        for (index, item) in routeList.enumerated() {
            let route = try string(item, "\(at).routes[\(index)]", text: .identifier)!
            if let problem = ManifestRules.routeProblem(route) { throw fail("\(at).routes[\(index)]", problem) }
            routes.append(route)
        }
        let entry = try string(object["entry"], "\(at).entry", required: false, text: .identifier) ?? "index.html"
        let fallback = try string(object["fallback"], "\(at).fallback", required: false, text: .identifier)
        for (name, path) in [("entry", entry), ("fallback", fallback)] {
            if let path, ManifestRules.filePathProblem(path) != nil {
                throw fail("\(at).\(name)", "\(quoted(path)) is not a relative file path inside the package")
            }
        }
        var archive = try remoteFile(object["archive"], "\(at).archive")
        if let files = object["archive"]?.object?["files"], !files.isNull {
            let index = try remoteFile(files, "\(at).archive.files")
            archive.files = FileIndexReference(url: index.url, sha256: index.sha256, size: index.size)
        }
        let tree = try string(object["tree"], "\(at).tree", text: .identifier)!
        guard Hex.isLowercase(tree, count: 64) else { throw fail("\(at).tree", "expected 64 lowercase hex digits") }
        var deltas = [Delta]()
        if let value = object["deltas"], !value.isNull {
            guard let list = value.array else { throw fail("\(at).deltas", "expected a list") }
            for (index, item) in list.enumerated() {
                let deltaField = "\(at).deltas[\(index)]"
                guard let deltaObject = item.object else { throw fail(deltaField, "expected an object") }
                let from = try string(deltaObject["from"], "\(deltaField).from", text: .identifier)!
                guard ManifestRules.isValidVersion(from) else {
                    throw fail("\(deltaField).from", "\(quoted(from)) is not a valid version")
                }
                deltas.append(Delta(from: from, file: try remoteFile(item, deltaField)))
            }
        }
        var shellBounds = [String: String]()
        for name in ["minShellVersion", "maxShellVersion"] {
            guard let bound = try string(object[name], "\(at).\(name)", required: false, text: .identifier) else { continue }
            if let problem = ManifestRules.shellVersionProblem(bound) { throw fail("\(at).\(name)", "\(quoted(bound)) \(problem)") }
            shellBounds[name] = bound
        }
        let minShell = shellBounds["minShellVersion"]
        let rollout = try integer(object["rollout"], "\(at).rollout", required: false)
        if let rollout, let problem = ManifestRules.rolloutProblem(rollout) {
            throw fail("\(at).rollout", problem)
        }
        let unpackedSize = try integer(object["unpackedSize"], "\(at).unpackedSize", required: false)
        if let unpackedSize, unpackedSize < 0 { throw fail("\(at).unpackedSize", "must not be negative") }
        var package = PackageEntry(
            id: id, version: version, routes: routes, entry: entry, fallback: fallback, archive: archive,
            tree: tree, deltas: deltas, minShellVersion: minShell, rollout: rollout, unpackedSize: unpackedSize.map(Int64.init))
        (package.notes, package.mandatory) = try ReleaseInfo.read(
            notes: object["notes"], mandatory: object["mandatory"], at: at, source: source)
        package.maxShellVersion = shellBounds["maxShellVersion"]
        if let disabled = object["disabled"], !disabled.isNull {
            guard let value = disabled.boolean else { throw fail("\(at).disabled", "expected true or false") }
            package.disabled = value
        }
        return package
    }

    func remoteFile(_ value: JSONValue?, _ field: String) throws -> RemoteFile {
        guard let object = value?.object else { throw fail(field, "expected an object") }
        let url = try string(object["url"], "\(field).url", text: .identifier)!
        guard !url.isEmpty, URL(string: url) != nil else { throw fail("\(field).url", "\(quoted(url)) is not a URL") }
        let sha256 = try string(object["sha256"], "\(field).sha256", text: .identifier)!
        guard Hex.isLowercase(sha256, count: 64) else { throw fail("\(field).sha256", "expected 64 lowercase hex digits") }
        let size = try integer(object["size"], "\(field).size", required: true)!
        guard size >= 0 else { throw fail("\(field).size", "must not be negative") }
        return RemoteFile(url: url, sha256: sha256, size: Int64(size))
    }
}

/// RFC 3339 timestamps, with or without fractional seconds.
package enum RFC3339 {
    package static func parse(_ text: String) -> Date? {
        // RFC 3339 §5.6: "T" and "Z" may be lowercase; the other characters have no case.
        let text = text.uppercased()
        if let date = try? Date.ISO8601FormatStyle().parse(text) { return date }
        return try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)
    }

    package static func format(_ date: Date) -> String { Date.ISO8601FormatStyle().format(date) }
}
