/// This build's version, sent as the User-Agent and printed by `--version`.
public enum OfflinePkgVersion {
    public static let current = "0.1.0"
}
