import FoundationEssentials
import OfflinePkg

/// What `keys init` or `keys rotate` wrote (docs/protocol.md#keys-documents).
package struct KeysReport: Sendable, Codable, Equatable {
    package var version: Int
    package var expires: Date?
    package var rootKeys: [String]
    package var rootThreshold: Int
    package var manifestKeys: [String]
    package var manifestThreshold: Int
    /// The root keys whose signatures were written beside the document.
    package var signedBy: [String]
    /// Key ids this version drops and adds against the one before it.
    package var removed: [String] = []
    package var added: [String] = []
    /// What was written, relative to the repository: the signatures, then the document.
    package var files: [String]
}

/// The changes `keys rotate` makes to the newest keys version.
package struct KeysChange: Sendable {
    package var addRoot: [TrustedKey] = []
    package var removeRoot: [TrustedKey] = []
    package var addManifest: [TrustedKey] = []
    package var removeManifest: [TrustedKey] = []
    package var rootThreshold: Int?
    package var manifestThreshold: Int?
    /// Nil: a year from now.
    package var expires: Date?

    package init() {}
}

extension Publisher {
    /// How long a keys version lasts when `--expires` is not given: renewed by a rotation at least once a
    /// year, which is also how often the offline root keys come out.
    package static let defaultKeysLifetime: TimeInterval = 365 * 86_400

    /// `keys init`: version 1, whose root keys are the public halves of `signers` (each signs it), and
    /// whose manifest keys are `manifestKeys`.
    package func initKeys(
        signers: [SigningKey], rootThreshold: Int, manifestKeys: [TrustedKey], manifestThreshold: Int, expires: Date?,
        waiting: (() -> Void)? = nil
    ) throws -> KeysReport {
        let lock = try lockRepository(waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        guard try RepositoryKeys.load(layout).versions.isEmpty else {
            throw OfflinePkgError.invalidArgument(
                "\(layout.keys) already holds keys documents; documents are never rewritten: change keys with `offlinepkg keys rotate`"
            )
        }
        var rootKeys = [TrustedKey]()
        for signer in signers where !rootKeys.contains(signer.publicKey) { rootKeys.append(signer.publicKey) }
        let root = try Self.role(rootKeys, threshold: rootThreshold, name: "root")
        let manifest = try Self.role(manifestKeys, threshold: manifestThreshold, name: "manifest")
        let document = try newDocument(version: 1, expires: expires, root: root, manifest: manifest)
        return try writeKeysVersion(document, signers: signers, previous: nil)
    }

    /// `keys rotate`: the next version, with `change` applied to the newest, signed by `signers`. Written
    /// only when a threshold of the newest version's root keys and a threshold of the new one's signed.
    package func rotateKeys(signers: [SigningKey], change: KeysChange, waiting: (() -> Void)? = nil) throws -> KeysReport {
        let lock = try lockRepository(waiting: waiting)
        defer { withExtendedLifetime(lock) {} }
        guard let current = try RepositoryKeys.load(layout).latest else {
            throw OfflinePkgError.invalidArgument("\(layout.root) has no keys documents yet: start with `offlinepkg keys init`")
        }
        func edit(_ keys: [TrustedKey], add: [TrustedKey], remove: [TrustedKey], name: String) throws -> [TrustedKey] {
            for key in remove where !keys.contains(key) {
                throw OfflinePkgError.invalidArgument(
                    "key \(key.keyID) is not a \(name) key of keys version \(current.version) (its \(name) keys: \(keys.map(\.keyID).joined(separator: ", ")))"
                )
            }
            for key in add where keys.contains(key) {
                throw OfflinePkgError.invalidArgument(
                    "key \(key.keyID) is already a \(name) key of keys version \(current.version)")
            }
            return keys.filter { !remove.contains($0) } + add
        }
        let rootKeys = try edit(current.root.keys, add: change.addRoot, remove: change.removeRoot, name: "root")
        let manifestKeys = try edit(
            current.manifest.keys, add: change.addManifest, remove: change.removeManifest, name: "manifest")
        let root = try Self.role(rootKeys, threshold: change.rootThreshold ?? current.root.threshold, name: "root")
        let manifest = try Self.role(
            manifestKeys, threshold: change.manifestThreshold ?? current.manifest.threshold, name: "manifest")
        let document = try newDocument(version: current.version + 1, expires: change.expires, root: root, manifest: manifest)
        return try writeKeysVersion(document, signers: signers, previous: current)
    }

    /// The lock of the repository, its scratch folder cleared: what every writer of it starts with.
    package func lockRepository(waiting: (() -> Void)?) throws -> FileLock {
        try FileSystem.makeDirectories(layout.root, mode: RepositoryLayout.folderMode)
        var lock = try FileLock(path: layout.lock, wait: false, mode: RepositoryLayout.fileMode)
        if lock == nil {
            waiting?()
            lock = try FileLock(path: layout.lock, wait: true, mode: RepositoryLayout.fileMode)
        }
        if FileSystem.exists(layout.scratch) { try FileSystem.removeTree(layout.scratch) }
        try FileSystem.makeDirectories(layout.scratch, mode: RepositoryLayout.folderMode)
        return lock!
    }

    private static func role(_ keys: [TrustedKey], threshold: Int, name: String) throws -> KeysDocument.Role {
        guard !keys.isEmpty else { throw OfflinePkgError.invalidArgument("a keys document needs at least one \(name) key") }
        guard keys.count <= KeysDocument.maximumKeysPerRole else {
            throw OfflinePkgError.invalidArgument(
                "\(keys.count) \(name) keys; a keys document lists at most \(KeysDocument.maximumKeysPerRole)")
        }
        for (index, key) in keys.enumerated() {
            if let other = keys[..<index].first(where: { $0.publicKeyBytes == key.publicKeyBytes }) {
                throw OfflinePkgError.invalidArgument(
                    "\(name) keys \(other.keyID) and \(key.keyID) are one public key under two key ids: one key is one signer")
            }
        }
        guard (1...keys.count).contains(threshold) else {
            throw OfflinePkgError.invalidArgument(
                "the \(name) threshold must be from 1 to the \(keys.count) \(name) key(s) (\(keys.map(\.keyID).joined(separator: ", "))), got \(threshold): pass --\(name)-threshold"
            )
        }
        return KeysDocument.Role(keys: keys, threshold: threshold)
    }

    /// The document's bytes, read back as a device reads them: what is written is what devices accept.
    private func newDocument(version: Int, expires: Date?, root: KeysDocument.Role, manifest: KeysDocument.Role) throws
        -> KeysDocument
    {
        let expires = expires ?? clock.now().addingTimeInterval(Self.defaultKeysLifetime)
        guard expires > clock.now() else {
            throw OfflinePkgError.invalidArgument(
                "the keys document would expire at \(RFC3339.format(expires)), which has passed")
        }
        let bytes = KeysDocument.encode(version: version, expires: expires, root: root, manifest: manifest)
        return try KeysDocument(bytes: bytes, source: layout.keysDocument(version: version))
    }

    /// Signs `document` with each of `signers`, checks the chain as a device will, and only then writes the
    /// signatures and, last, the document itself.
    private func writeKeysVersion(_ document: KeysDocument, signers: [SigningKey], previous: KeysDocument?) throws -> KeysReport {
        let path = layout.keysDocument(version: document.version)
        let allowed = (previous?.root.keys ?? []) + document.root.keys
        var signatures = [(keyID: String, bytes: [UInt8])]()
        for signer in signers where !signatures.contains(where: { $0.keyID == signer.keyID }) {
            guard allowed.contains(signer.publicKey) else {
                let versions = previous.map { "keys version \($0.version) or \(document.version)" } ?? "keys version 1"
                throw OfflinePkgError.invalidArgument(
                    "--sign-key \(signer.keyID) is not a root key of \(versions); root keys sign keys documents, manifest keys sign manifests"
                )
            }
            let comment = "timestamp:\(Int(clock.now().timeIntervalSince1970))\tfile:\(document.version).json"
            signatures.append((signer.keyID, try signer.sign(document.bytes, trustedComment: comment)))
        }
        let files = signatures.map(\.bytes)
        let problem: String?
        if let previous {
            problem = KeysChain.problem(from: previous, to: document, signatures: files, source: path)
        } else {
            let own = SignerTally(message: document.bytes, signatures: files, keys: document.root.keys, source: path)
            problem =
                own.meets(document.root.threshold)
                ? nil : "version 1 " + own.shortfall(of: document.root, named: "its own root keys")
        }
        if let problem {
            throw OfflinePkgError.keysRefused(
                source: path, reason: "not written: \(problem). Pass the missing root keys with --sign-key; nothing was written")
        }
        guard !FileSystem.exists(path) else {
            throw OfflinePkgError.invalidArgument("\(path) already exists; keys documents are never rewritten")
        }
        try FileSystem.makeDirectories(layout.keys, mode: RepositoryLayout.folderMode)
        var written = [String]()
        for (keyID, bytes) in signatures {
            let scratch = layout.temporary("keys-\(document.version)-\(keyID).minisig")
            try FileSystem.write(bytes, to: scratch, mode: RepositoryLayout.fileMode)
            try FileSystem.rename(scratch, to: layout.keysSignature(version: document.version, keyID: keyID))
            written.append("keys/\(document.version).json.\(keyID).minisig")
        }
        let scratch = layout.temporary("keys-\(document.version).json")
        try FileSystem.write(document.bytes, to: scratch, mode: RepositoryLayout.fileMode)
        try FileSystem.rename(scratch, to: path)
        try FileSystem.syncDirectory(layout.keys)
        written.append("keys/\(document.version).json")
        let before = previous.map { ($0.root.keys + $0.manifest.keys).map(\.keyID) } ?? []
        let after = (document.root.keys + document.manifest.keys).map(\.keyID)
        return KeysReport(
            version: document.version, expires: document.expires, rootKeys: document.root.keyIDs,
            rootThreshold: document.root.threshold, manifestKeys: document.manifest.keyIDs,
            manifestThreshold: document.manifest.threshold, signedBy: signatures.map(\.keyID),
            removed: Array(Set(before).subtracting(after)).sorted(),
            added: previous == nil ? [] : Array(Set(after).subtracting(before)).sorted(),
            files: written)
    }
}
