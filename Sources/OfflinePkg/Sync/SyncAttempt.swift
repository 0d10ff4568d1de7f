import Synchronization

/// How far one sync got, for its install report (docs/protocol.md#install-reports): the manifest it accepted (its sequence and
/// reports URL) and the changes its plan would make. A failed sync throws, and its report still names
/// the release that did not install.
package final class SyncAttempt: Sendable {
    package struct Progress: Sendable {
        /// Whether a manifest passed every check; only then do `sequence` and `reportsURL` describe it.
        package var accepted = false
        package var sequence: Int?
        package var reportsURL: String?
        /// What the switch would change (via and bytes not known yet).
        package var changes: [PackageChange] = []
    }

    private let progress = Mutex(Progress())

    package init() {}

    package var current: Progress { progress.withLock { $0 } }

    func accepted(_ manifest: Manifest) {
        progress.withLock {
            $0.accepted = true
            $0.sequence = manifest.sequence
            $0.reportsURL = manifest.reportsURL
        }
    }

    func planned(_ changes: [PackageChange]) {
        progress.withLock { $0.changes = changes }
    }
}
