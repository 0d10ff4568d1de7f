// Temporary until the Trust branch lands.
public struct TrustedKey: Sendable, Equatable {
    public var keyID: String
}
package enum SignatureVerifier {
    static func verify(message: [UInt8], signature: [UInt8], keys: [TrustedKey], source: String) throws -> String {
        throw OfflinePkgError.signatureRefused(source: source, reason: "not built yet")
    }
}
extension TrustedKey {
    public init(contentsOfFile path: String) throws { throw OfflinePkgError.invalidArgument("not built yet") }
}
