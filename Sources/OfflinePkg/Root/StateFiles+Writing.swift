import FoundationEssentials

// `state.json` written without `JSONEncoder` (`StateJSON`): each type's members under the keys its
// `Codable` form writes. StateFileReaderTests writes a state with every field filled and reads it back
// with `JSONDecoder`, so a field added later and not written here fails a test.

extension SyncState {
    package var stateJSON: StateJSON {
        .members([
            "manifestURL": manifestURL.map(StateJSON.string), "etag": etag.map(StateJSON.string),
            "lastModified": lastModified.map(StateJSON.string), "lastCheck": lastCheck.map(StateJSON.date),
            "acceptedSequence": acceptedSequence.map(StateJSON.integer),
            "acceptedManifestSHA256": acceptedManifestSHA256.map(StateJSON.string),
            "evaluatedInputs": evaluatedInputs.map(StateJSON.string),
            "heldBack": heldBack.map { .array($0.map(\.stateJSON)) },
            "reverted": reverted.map { .dictionary($0, StateJSON.string) },
            "rolledBack": rolledBack.map { .dictionary($0, StateJSON.string) },
            "channels": channels.map { .dictionary($0, \.stateJSON) }, "lastAttempt": lastAttempt.map(StateJSON.date),
            "lastSuccess": lastSuccess.map(StateJSON.date), "consecutiveFailures": consecutiveFailures.map(StateJSON.integer),
            "lastError": lastError?.stateJSON, "lastChanges": lastChanges.map { .array($0.map(\.stateJSON)) },
            "trust": trust.map { .dictionary($0, \.stateJSON) },
        ])
    }
}

extension AcceptedManifest {
    package var stateJSON: StateJSON {
        .members([
            "sequence": .integer(sequence), "sha256": sha256.map(StateJSON.string),
            "keysVersion": keysVersion.map(StateJSON.integer), "manifestKeys": manifestKeys.map(StateJSON.string),
        ])
    }
}

extension HeldBackRelease {
    package var stateJSON: StateJSON { .members(["id": .string(id), "version": .string(version), "reason": .string(reason)]) }
}

extension SyncFailure {
    package var stateJSON: StateJSON {
        .members(["time": .date(time), "exitStatus": .integer(exitStatus), "message": .string(message)])
    }
}

extension PackageChange {
    package var stateJSON: StateJSON {
        .members([
            "id": .string(id), "from": from.map(StateJSON.string), "to": to.map(StateJSON.string),
            "via": via.map { .string($0.rawValue) }, "notes": notes.map(StateJSON.string),
            "mandatory": mandatory.map(StateJSON.boolean), "bytes": bytes.map(StateJSON.integer),
        ])
    }
}

extension StoredTrust {
    package var stateJSON: StateJSON {
        .members([
            "document": document.map(StateJSON.string), "keys": keys.map { .array($0.map(StateJSON.string)) },
            "removed": removed.map { .dictionary($0, StateJSON.integer) }, "since": .date(since),
            "baselineReset": baselineReset?.stateJSON,
        ])
    }
}

extension BaselineReset {
    package var stateJSON: StateJSON {
        .members(["keysVersion": keysVersion.map(StateJSON.integer), "sequence": .integer(sequence), "time": .date(time)])
    }
}
