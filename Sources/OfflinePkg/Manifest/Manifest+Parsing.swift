import Foundation

extension Manifest {
    /// Parses and validates manifest bytes; `source` names the manifest in error messages.
    public init(parsing bytes: [UInt8], source: String) throws {
        guard bytes.count <= Manifest.maximumSize else {
            throw OfflinePkgError.sizeMismatch(what: "manifest \(source)", reason: "larger than \(Manifest.maximumSize) bytes")
        }
        let root: Any
        do {
            root = try JSONSerialization.jsonObject(with: Data(bytes), options: [])
        } catch {
            throw OfflinePkgError.invalidManifest(source: source, field: "(document)", reason: "not valid JSON")
        }
        var reader = ManifestReader(source: source)
        self = try reader.manifest(from: root)
    }
}

/// Walks the JSON tree and checks every rule of SPEC §2, naming the field of each failure.
private struct ManifestReader {
    let source: String

    func fail(_ field: String, _ reason: String) -> OfflinePkgError {
        .invalidManifest(source: source, field: field, reason: reason)
    }

    mutating func manifest(from root: Any) throws -> Manifest {
        guard let object = root as? [String: Any] else { throw fail("(document)", "expected a JSON object") }
        let format = try integer(object["format"], "format", required: true)!
        if format > Manifest.supportedFormat {
            throw OfflinePkgError.manifestFormatTooNew(source: source, format: format)
        }
        guard format == Manifest.supportedFormat else { throw fail("format", "must be 1, got \(format)") }
        let sequence = try integer(object["sequence"], "sequence", required: true)!
        guard sequence >= 1 else { throw fail("sequence", "must be at least 1, got \(sequence)") }
        var expires: Date?
        if let value = object["expires"], !(value is NSNull) {
            guard let text = value as? String, let date = RFC3339.parse(text) else {
                throw fail("expires", "expected an RFC 3339 time such as 2027-01-31T00:00:00Z")
            }
            expires = date
        }
        guard let list = object["packages"] as? [Any] else { throw fail("packages", "expected a list") }
        var packages = [PackageEntry]()
        var ids = Set<String>()
        var routeOwners = [String: String]()
        for (index, item) in list.enumerated() {
            let package = try self.package(from: item, field: "packages[\(index)]")
            guard ids.insert(package.id).inserted else {
                throw fail("packages[\(index)].id", "duplicate package id \"\(package.id)\"")
            }
            for route in package.routes {
                let key = RouteKey.normalized(route) ?? route
                if let owner = routeOwners[key] {
                    throw fail("packages[\(index)].routes", "route \(route) is already listed by package \"\(owner)\"")
                }
                routeOwners[key] = package.id
            }
            packages.append(package)
        }
        var manifest = Manifest(sequence: sequence, expires: expires, packages: packages)
        if let runtime = object["runtime"], !(runtime is NSNull) {
            manifest.runtime = try RuntimeConfiguration(json: runtime, source: source)
        }
        return manifest
    }

    func package(from value: Any, field: String) throws -> PackageEntry {
        guard let object = value as? [String: Any] else { throw fail(field, "expected an object") }
        let id = try string(object["id"], "\(field).id")!
        guard PackageEntry.isValidID(id) else {
            throw fail("\(field).id", "\"\(id)\" must match [a-z0-9][a-z0-9._-]{0,63}")
        }
        let at = "\(field) (\(id))"
        let version = try string(object["version"], "\(at).version")!
        guard PackageEntry.isValidVersion(version) else {
            throw fail("\(at).version", "\"\(version)\" must match [A-Za-z0-9._+-]{1,64}")
        }
        guard let routeList = object["routes"] as? [Any], !routeList.isEmpty else {
            throw fail("\(at).routes", "expected a non-empty list of URL prefixes")
        }
        var routes = [String]()
        for (index, item) in routeList.enumerated() {
            guard let route = item as? String, RouteKey.normalized(route) != nil, route.hasSuffix("/") else {
                throw fail("\(at).routes[\(index)]", "expected an absolute http or https URL prefix ending in /")
            }
            routes.append(route)
        }
        let entry = try string(object["entry"], "\(at).entry", required: false) ?? "index.html"
        let fallback = try string(object["fallback"], "\(at).fallback", required: false)
        for (name, path) in [("entry", entry), ("fallback", fallback)] {
            if let path, ArchivePath.validate(path) != nil || path.hasSuffix("/") {
                throw fail("\(at).\(name)", "\"\(path)\" is not a relative file path inside the package")
            }
        }
        let archive = try remoteFile(object["archive"], "\(at).archive")
        let tree = try string(object["tree"], "\(at).tree")!
        guard Hex.isLowercase(tree, count: 64) else { throw fail("\(at).tree", "expected 64 lowercase hex digits") }
        var deltas = [Delta]()
        if let value = object["deltas"], !(value is NSNull) {
            guard let list = value as? [Any] else { throw fail("\(at).deltas", "expected a list") }
            for (index, item) in list.enumerated() {
                let deltaField = "\(at).deltas[\(index)]"
                guard let deltaObject = item as? [String: Any] else { throw fail(deltaField, "expected an object") }
                let from = try string(deltaObject["from"], "\(deltaField).from")!
                guard PackageEntry.isValidVersion(from) else {
                    throw fail("\(deltaField).from", "\"\(from)\" is not a valid version")
                }
                deltas.append(Delta(from: from, file: try remoteFile(deltaObject, deltaField)))
            }
        }
        let minShell = try string(object["minShellVersion"], "\(at).minShellVersion", required: false)
        if let minShell, ShellVersion(minShell) == nil {
            throw fail("\(at).minShellVersion", "\"\(minShell)\" is not a dotted numeric version")
        }
        let rollout = try integer(object["rollout"], "\(at).rollout", required: false)
        if let rollout, !(0...100).contains(rollout) {
            throw fail("\(at).rollout", "must be between 0 and 100, got \(rollout)")
        }
        return PackageEntry(
            id: id, version: version, routes: routes, entry: entry, fallback: fallback, archive: archive,
            tree: tree, deltas: deltas, minShellVersion: minShell, rollout: rollout)
    }

    func remoteFile(_ value: Any?, _ field: String) throws -> RemoteFile {
        guard let object = value as? [String: Any] else { throw fail(field, "expected an object") }
        let url = try string(object["url"], "\(field).url")!
        guard !url.isEmpty, URL(string: url) != nil else { throw fail("\(field).url", "\"\(url)\" is not a URL") }
        let sha256 = try string(object["sha256"], "\(field).sha256")!
        guard Hex.isLowercase(sha256, count: 64) else { throw fail("\(field).sha256", "expected 64 lowercase hex digits") }
        let size = try integer(object["size"], "\(field).size", required: true)!
        guard size >= 0 else { throw fail("\(field).size", "must not be negative") }
        return RemoteFile(url: url, sha256: sha256, size: Int64(size))
    }

    func string(_ value: Any?, _ field: String, required: Bool = true) throws -> String? {
        guard let value, !(value is NSNull) else {
            if required { throw fail(field, "missing") }
            return nil
        }
        guard let text = value as? String else { throw fail(field, "expected a string") }
        return text
    }

    func integer(_ value: Any?, _ field: String, required: Bool) throws -> Int? {
        guard let value, !(value is NSNull) else {
            if required { throw fail(field, "missing") }
            return nil
        }
        // JSONSerialization hands back NSNumber for numbers and booleans alike; its type code tells them
        // apart ("c" for a boolean, "d" for a fraction or exponent, "Q" past Int64), and numbers past
        // UInt64 come back as NSDecimalNumber.
        if value is NSDecimalNumber { throw fail(field, "expected an integer, got a number too large for 64 bits") }
        guard let number = value as? NSNumber else { throw fail(field, "expected an integer") }
        let code = String(cString: number.objCType)
        if code == "c" || type(of: value) != NSNumber.self { throw fail(field, "expected an integer, got a boolean") }
        switch code {
        case "d", "f":
            if let integer = Int(exactly: number.doubleValue) { return integer }
            throw fail(field, "expected an integer, got \(number.doubleValue)")
        case "Q":
            if number.uint64Value <= UInt64(Int.max) { return Int(number.uint64Value) }
            throw fail(field, "expected an integer, got a number too large for 64 bits")
        default:
            return number.intValue
        }
    }
}

extension PackageEntry {
    /// `[a-z0-9][a-z0-9._-]{0,63}`
    public static func isValidID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        func lowerAlnum(_ byte: UInt8) -> Bool { (0x61...0x7a).contains(byte) || (0x30...0x39).contains(byte) }
        return lowerAlnum(bytes[0]) && bytes.dropFirst().allSatisfy { lowerAlnum($0) || $0 == 0x2e || $0 == 0x5f || $0 == 0x2d }
    }

    /// `[A-Za-z0-9._+-]{1,64}`
    public static func isValidVersion(_ version: String) -> Bool {
        let bytes = Array(version.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        return bytes.allSatisfy { byte in
            (0x61...0x7a).contains(byte) || (0x41...0x5a).contains(byte) || (0x30...0x39).contains(byte)
                || byte == 0x2e || byte == 0x5f || byte == 0x2b || byte == 0x2d
        }
    }
}

/// RFC 3339 timestamps, with or without fractional seconds.
package enum RFC3339 {
    package static func parse(_ text: String) -> Date? {
        // RFC 3339 §5.6: "T" and "Z" may be lowercase; the other characters have no case.
        let text = text.uppercased()
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }

    package static func format(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }
}
