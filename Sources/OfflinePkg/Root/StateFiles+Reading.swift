import FoundationEssentials

// The readers of `state.json`, `active.json` and `origins.json` (`StateFileReadable`): each reads the
// keys its type's `Codable` form writes, with `decodeIfPresent`'s meaning for an optional one (missing
// or null is nil). StateFileReaderTests checks each type's keys against its stored properties, so a
// field added later cannot be dropped here without a failing test.

extension SyncState: StateFileReadable {
    package static let stateKeys: Set<String> = [
        "manifestURL", "etag", "lastModified", "lastCheck", "acceptedSequence", "acceptedManifestSHA256",
        "evaluatedInputs", "heldBack", "reverted", "rolledBack", "channels", "lastAttempt", "lastSuccess",
        "consecutiveFailures", "lastError", "lastChanges", "trust",
    ]

    package init(stateFields fields: StateFields) throws {
        self.init()
        manifestURL = try fields.optional("manifestURL", StateValue.string)
        etag = try fields.optional("etag", StateValue.string)
        lastModified = try fields.optional("lastModified", StateValue.string)
        lastCheck = try fields.optional("lastCheck", StateValue.date)
        acceptedSequence = try fields.optional("acceptedSequence", StateValue.int)
        acceptedManifestSHA256 = try fields.optional("acceptedManifestSHA256", StateValue.string)
        evaluatedInputs = try fields.optional("evaluatedInputs", StateValue.string)
        heldBack = try fields.optional("heldBack") { try StateValue.array($0, StateValue.object) }
        reverted = try fields.optional("reverted") { try StateValue.dictionary($0, StateValue.string) }
        rolledBack = try fields.optional("rolledBack") { try StateValue.dictionary($0, StateValue.string) }
        channels = try fields.optional("channels") { try StateValue.dictionary($0, StateValue.object) }
        lastAttempt = try fields.optional("lastAttempt", StateValue.date)
        lastSuccess = try fields.optional("lastSuccess", StateValue.date)
        consecutiveFailures = try fields.optional("consecutiveFailures", StateValue.int)
        lastError = try fields.optional("lastError", StateValue.object)
        lastChanges = try fields.optional("lastChanges") { try StateValue.array($0, StateValue.object) }
        trust = try fields.optional("trust") { try StateValue.dictionary($0, StateValue.object) }
    }
}

extension AcceptedManifest: StateFileReadable {
    package static let stateKeys: Set<String> = ["sequence", "sha256", "keysVersion", "manifestKeys"]

    package init(stateFields fields: StateFields) throws {
        self.init(
            sequence: try fields.required("sequence", StateValue.int), sha256: try fields.optional("sha256", StateValue.string),
            keysVersion: try fields.optional("keysVersion", StateValue.int),
            manifestKeys: try fields.optional("manifestKeys", StateValue.string))
    }
}

extension HeldBackRelease: StateFileReadable {
    package static let stateKeys: Set<String> = ["id", "version", "reason"]

    package init(stateFields fields: StateFields) throws {
        id = try fields.required("id", StateValue.string)
        version = try fields.required("version", StateValue.string)
        reason = try fields.required("reason", StateValue.string)
    }
}

extension SyncFailure: StateFileReadable {
    package static let stateKeys: Set<String> = ["time", "exitStatus", "message"]

    package init(stateFields fields: StateFields) throws {
        self.init(
            time: try fields.required("time", StateValue.date), exitStatus: try fields.required("exitStatus", StateValue.int32),
            message: try fields.required("message", StateValue.string))
    }
}

extension PackageChange: StateFileReadable {
    package static let stateKeys: Set<String> = ["id", "from", "to", "via", "notes", "mandatory", "bytes"]

    package init(stateFields fields: StateFields) throws {
        id = try fields.required("id", StateValue.string)
        from = try fields.optional("from", StateValue.string)
        to = try fields.optional("to", StateValue.string)
        via = try fields.optional("via", StateValue.raw)
        notes = try fields.optional("notes", StateValue.string)
        mandatory = try fields.optional("mandatory", StateValue.bool)
        bytes = try fields.optional("bytes", StateValue.int64)
    }
}

extension StoredTrust: StateFileReadable {
    package static let stateKeys: Set<String> = ["document", "keys", "removed", "since", "baselineReset"]

    package init(stateFields fields: StateFields) throws {
        document = try fields.optional("document", StateValue.string)
        keys = try fields.optional("keys") { try StateValue.array($0, StateValue.string) }
        removed = try fields.optional("removed") { try StateValue.dictionary($0, StateValue.int) }
        since = try fields.required("since", StateValue.date)
        baselineReset = try fields.optional("baselineReset", StateValue.object)
    }
}

extension BaselineReset: StateFileReadable {
    package static let stateKeys: Set<String> = ["keysVersion", "sequence", "time"]

    package init(stateFields fields: StateFields) throws {
        keysVersion = try fields.optional("keysVersion", StateValue.int)
        sequence = try fields.required("sequence", StateValue.int)
        time = try fields.required("time", StateValue.date)
    }
}

extension ActiveRecord: StateFileReadable {
    package static let stateKeys: Set<String> = ["current", "previous", "previousWasRolledBack"]

    package init(stateFields fields: StateFields) throws {
        self.init(
            current: try fields.required("current", StateValue.object), previous: try fields.optional("previous", StateValue.object),
            previousWasRolledBack: try fields.optional("previousWasRolledBack", StateValue.bool))
    }
}

extension ActiveSet: StateFileReadable {
    package static let stateKeys: Set<String> = ["generation", "sequence", "activatedAt", "packages"]

    /// As `init(from:)`: a null or missing `activatedAt` (the empty set of generation 0) is 1970.
    package init(stateFields fields: StateFields) throws {
        self.init(
            generation: try fields.required("generation", StateValue.int), sequence: try fields.required("sequence", StateValue.int),
            activatedAt: try fields.optional("activatedAt", StateValue.date) ?? Date(timeIntervalSince1970: 0),
            packages: try fields.required("packages") { try StateValue.array($0, StateValue.object) })
    }
}

extension InstalledPackage: StateFileReadable {
    package static let stateKeys: Set<String> = [
        "id", "version", "tree", "routes", "entry", "fallback", "archive", "notes", "mandatory",
    ]

    package init(stateFields fields: StateFields) throws {
        id = try fields.required("id", StateValue.string)
        version = try fields.required("version", StateValue.string)
        tree = try fields.required("tree", StateValue.string)
        routes = try fields.required("routes") { try StateValue.array($0, StateValue.string) }
        entry = try fields.required("entry", StateValue.string)
        fallback = try fields.optional("fallback", StateValue.string)
        archive = try fields.optional("archive", StateValue.object)
        notes = try fields.optional("notes", StateValue.string)
        mandatory = try fields.optional("mandatory", StateValue.bool)
    }
}

extension RemoteFile: StateFileReadable {
    package static let stateKeys: Set<String> = ["url", "sha256", "size", "files"]

    package init(stateFields fields: StateFields) throws {
        self.init(
            url: try fields.required("url", StateValue.string), sha256: try fields.required("sha256", StateValue.string),
            size: try fields.required("size", StateValue.int64))
        files = try fields.optional("files", StateValue.object)
    }
}

extension FileIndexReference: StateFileReadable {
    package static let stateKeys: Set<String> = ["url", "sha256", "size"]

    package init(stateFields fields: StateFields) throws {
        self.init(
            url: try fields.required("url", StateValue.string), sha256: try fields.required("sha256", StateValue.string),
            size: try fields.required("size", StateValue.int64))
    }
}

extension OriginRanges.Record: StateFileReadable {
    package static let stateKeys: Set<String> = ["support", "server", "checked", "http"]

    package init(stateFields fields: StateFields) throws {
        support = try fields.optional("support", StateValue.raw)
        server = try fields.optional("server", StateValue.string)
        checked = try fields.required("checked", StateValue.double)
        http = try fields.optional("http", StateValue.string)
    }
}
