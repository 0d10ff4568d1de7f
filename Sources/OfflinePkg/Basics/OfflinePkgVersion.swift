/// This build's version, sent as the User-Agent and printed by `--version`.
package enum OfflinePkgVersion {
    package static let current = "0.1.0"
}
