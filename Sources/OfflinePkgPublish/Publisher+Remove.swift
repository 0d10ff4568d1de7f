import FoundationEssentials
import OfflinePkg

/// What `remove` does to a package of the manifest.
package enum PackageWithdrawal: String, Sendable, Codable {
    /// Out of the manifest: devices stop serving the package at their next sync.
    case remove
    /// `"disabled": true` on its entry, as CodePush disables a release: devices do not take this
    /// release, and keep what they have of the package (an older version, or this one if they took it
    /// already). A later publish of the package writes its entry anew, enabled.
    case disable
    /// The flag taken off again: devices take the release at their next sync.
    case enable
}

/// What a `remove` wrote.
package struct WithdrawalReport: Sendable, Codable, Equatable {
    package var id: String
    package var action: PackageWithdrawal
    /// The version the manifest offered for the package.
    package var version: String
    /// The sequence of the manifest written; the manifest's own when nothing changed.
    package var sequence: Int
    /// False when the manifest already said so (`--disable` on a disabled release): nothing was written.
    package var changed: Bool
    package var signed: Bool
}

extension Publisher {
    /// Takes package `id` out of the manifest, or disables or enables its release, in a new manifest
    /// (sequence + 1) signed with `signingKeys` — the way to heal a release devices refuse, whose other
    /// packages' updates they refuse with it. The archives and `trees/` stay: a later publish of the
    /// package still writes deltas, and `promote` still finds the version.
    package func withdraw(
        id: String, _ action: PackageWithdrawal, signingKeys: [SigningKey] = [], unsign: Bool = false,
        waiting: (() -> Void)? = nil
    ) throws -> WithdrawalReport {
        guard ManifestRules.isValidID(id) else {
            throw OfflinePkgError.invalidArgument("package id \"\(id)\" must match \(ManifestRules.idPattern)")
        }
        guard FileSystem.exists(layout.manifest) else {
            throw OfflinePkgError.unavailable("no repository at \(layout.root): it has no manifest.json")
        }
        let (lock, document) = try open(waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        try RepositorySigning(layout).check(signs: !signingKeys.isEmpty, unsign: unsign, repository: layout.root)
        let signer = try ManifestSigner(keys: signingKeys, repository: layout, now: clock.now())
        guard let package = document.package(id), var object = document.packageObject(id) else {
            throw OfflinePkgError.unavailable("\(layout.manifest) has no package \"\(id)\"")
        }
        var report = WithdrawalReport(
            id: id, action: action, version: package.version, sequence: document.sequence, changed: true,
            signed: RepositorySigning(layout) == .signed)
        switch action {
        case .remove: break
        case .disable, .enable:
            guard package.disabled != (action == .disable) else {
                report.changed = false
                try? FileSystem.removeTree(layout.scratch)
                return report
            }
            if action == .disable { object["disabled"] = true } else { object["disabled"] = nil }
        }
        let next = try nextManifest(document, expires: nil, expiresIn: nil, keysVersion: signer.keysVersion) { document in
            if action == .remove { document.removePackage(id) } else { document.replacePackage(object: object, id: id) }
        }
        var record = PublishHistory.Record(
            version: package.version, publishedAt: clock.now(), sequence: next.sequence, notes: nil, mandatory: false, rollout: nil)
        record.action = action
        let written = try writeManifest(next, id: id, record: record, expiresIn: nil, signer: signer, events: nil)
        (report.sequence, report.signed) = (written.sequence, !written.signers.isEmpty)
        return report
    }
}
