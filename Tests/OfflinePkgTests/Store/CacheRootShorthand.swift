@testable import OfflinePkg

extension PackageStore {
    /// The writer of the root this store reads, told of its switches: `CacheRoot(store:)`.
    var writer: CacheRoot { CacheRoot(store: self) }
}
