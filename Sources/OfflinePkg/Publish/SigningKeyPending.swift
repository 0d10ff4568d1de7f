// TEMPORARY — delete at merge. The trust branch brings the real minisign `SigningKey` (and `keygen`);
// this stand-in only keeps the `publish` branch compiling. Its one caller is PublishCommand's
// `--sign-key` call site.
public struct SigningKey {
    public init(contentsOfFile path: String) throws {
        throw OfflinePkgError.invalidArgument("signing lands with the trust module")
    }

    public func sign(_ message: [UInt8], trustedComment: String) -> [UInt8] { [] }
}
