import FoundationEssentials
import OfflinePkg

/// A repository's keys documents (docs/protocol.md#keys-documents), read from `keys/` and verified as a
/// device reads them: version 1 signed by a threshold of its own root keys, each later version by a
/// threshold of the one before it and of its own. `publish`, `keys rotate`, `promote` and `keys show` start
/// here, so a publisher never builds on a chain that devices would refuse.
package struct RepositoryKeys: Sendable {
    /// Versions 1 to N, in order, each with the root keys whose signatures verified it.
    package struct Version: Sendable {
        package var document: KeysDocument
        package var signedBy: [TrustedKey]
    }

    package var versions: [Version] = []

    package var latest: KeysDocument? { versions.last?.document }

    /// Reads and verifies `keys/` of `layout`; an empty list when the repository has none. Throws
    /// `.keysRefused` naming the version that breaks the chain, or a missing one in the middle.
    package static func load(_ layout: RepositoryLayout) throws -> RepositoryKeys {
        var keys = RepositoryKeys()
        let names = FileSystem.contents(of: layout.keys)
        let numbered = names.compactMap { name -> Int? in
            guard name.hasSuffix(".json"), let number = Int(name.dropLast(5)), number >= 1, "\(number).json" == name else {
                return nil
            }
            return number
        }
        guard let highest = numbered.max() else { return keys }
        for version in 1...highest {
            let path = layout.keysDocument(version: version)
            guard FileSystem.exists(path) else {
                throw OfflinePkgError.keysRefused(
                    source: path, reason: "missing, and keys/\(highest).json is there: versions are read in order, none skipped")
            }
            let document = try KeysDocument(bytes: FileSystem.read(path, limit: KeysDocument.maximumSize), source: path)
            guard document.version == version else {
                throw OfflinePkgError.keysRefused(source: path, reason: "it says version \(document.version)")
            }
            let signatures = signatureFiles(of: version, in: layout, names: names)
            if let previous = keys.latest {
                if let problem = KeysChain.problem(from: previous, to: document, signatures: signatures, source: path) {
                    throw OfflinePkgError.keysRefused(source: path, reason: problem)
                }
            } else {
                let own = SignerTally(message: document.bytes, signatures: signatures, keys: document.root.keys, source: path)
                guard own.meets(document.root.threshold) else {
                    throw OfflinePkgError.keysRefused(
                        source: path, reason: "version 1 " + own.shortfall(of: document.root, named: "its own root keys"))
                }
            }
            let previousRoot = keys.latest?.root.keys ?? []
            let signedBy = SignerTally(
                message: document.bytes, signatures: signatures,
                keys: previousRoot + document.root.keys.filter { !previousRoot.contains($0) },
                source: path
            ).valid
            keys.versions.append(Version(document: document, signedBy: signedBy))
        }
        return keys
    }

    /// The signature files beside `keys/<version>.json`.
    static func signatureFiles(of version: Int, in layout: RepositoryLayout, names: [String]) -> [[UInt8]] {
        let prefix = "\(version).json."
        return names.filter { $0.hasPrefix(prefix) && $0.hasSuffix(".minisig") }.sorted().compactMap {
            try? FileSystem.read(layout.keys + "/" + $0, limit: 64 << 10)
        }
    }
}

extension KeysDocument {
    /// The bytes of a keys document, laid out as docs/protocol.md#keys-documents shows one: the fields in
    /// that order, one key per line. A device reads any layout; a fixed one keeps reviews of `keys/` diffs
    /// short.
    package static func encode(version: Int, expires: Date?, root: Role, manifest: Role) -> [UInt8] {
        func role(_ role: Role) -> String {
            let keys = role.keys.map { "      \"\($0.minisignPublicKey)\"" }.joined(separator: ",\n")
            return "{\n    \"keys\": [\n\(keys)\n    ],\n    \"threshold\": \(role.threshold)\n  }"
        }
        var lines = ["{", "  \"format\": \(supportedFormat),", "  \"version\": \(version),"]
        if let expires { lines.append("  \"expires\": \"\(RFC3339.format(expires))\",") }
        lines.append("  \"root\": \(role(root)),")
        lines.append("  \"manifest\": \(role(manifest))")
        lines.append("}")
        return Array((lines.joined(separator: "\n") + "\n").utf8)
    }
}
