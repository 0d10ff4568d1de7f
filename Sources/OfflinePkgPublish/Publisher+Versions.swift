import OfflinePkg

/// The versions a repository published of each package, oldest first (`trees/<id>/versions`), and the
/// downgrade check they serve.
extension Publisher {
    package func versionLog(_ id: String) throws -> [String] {
        let path = layout.versionLog(id: id)
        guard FileSystem.exists(path) else { return [] }
        return String(decoding: try FileSystem.read(path), as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// Moves `version` to the end of the log: the most recently published version is the newest, even
    /// when it is an old version published again.
    func recordVersion(_ version: String, id: String) throws {
        let versions = try versionLog(id).filter { $0 != version } + [version]
        try FileSystem.writeAtomically(
            Array(versions.map { $0 + "\n" }.joined().utf8), to: layout.versionLog(id: id), mode: RepositoryLayout.fileMode)
    }

    /// Refuses a version lower than the newest published for the package (as `ReleaseVersion` orders
    /// them), unless the request allows a downgrade: devices would go back to older content, which a
    /// release pipeline does by mistake far more often than on purpose. The same version again (a
    /// republish) is not lower. Versions without an order (`ReleaseVersion`) are never refused.
    func checkNotDowngrade(_ request: PublishRequest, document: ManifestDocument) throws {
        guard !request.allowDowngrade, let new = ReleaseVersion(request.version) else { return }
        let published = try versionLog(request.id) + [document.package(request.id)?.version].compactMap { $0 }
        guard let newest = published.compactMap(ReleaseVersion.init).max(), new < newest else { return }
        throw OfflinePkgError.publishRefused(
            reason:
                "\(request.id) \(request.version) is lower than \(newest), published before: devices would go back to older content; pass --allow-downgrade if that is meant"
        )
    }
}
