import Testing

@testable import OfflinePkg
@testable import OfflinePkgPublish

/// Every way a signature can be wrong is refused, and the refusal names the check that caught it.
/// Each case asserts its own reason, so it fails if its check is removed and a later one catches it.
@Suite("signature refusals")
struct TrustSignatureRefusalTests {
    /// One signed message, and what the verifier is handed after a tampering.
    struct Case {
        var message: [UInt8]
        var signature: [UInt8]
        var keys: [TrustedKey]
    }

    enum Tampering: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case flippedMessageByte, appendedMessageByte, flippedSignatureByte, prehashedRelabelledLegacy
        case flippedTrustedComment, flippedGlobalSignatureByte
        case untrustedKey, noTrustedKeys, flippedKeyIDByte, sameKeyIDOtherKey
        case malformedBase64, nonCanonicalBase64, shortSignatureRecord, truncatedFile, truncatedLastLine, extraLine
        case missingUntrustedPrefix, missingTrustedPrefix, carriageReturnInComment, nulInComment
        case oversizedFile, unknownAlgorithm

        var testDescription: String { rawValue }

        var expectedReason: String {
            switch self {
            case .flippedMessageByte, .appendedMessageByte, .flippedSignatureByte, .prehashedRelabelledLegacy, .sameKeyIDOtherKey:
                "wrong signature: "
            case .flippedTrustedComment, .flippedGlobalSignatureByte:
                "wrong trusted-comment signature: "
            case .untrustedKey, .flippedKeyIDByte:
                "signed by key "
            case .noTrustedKeys:
                "signed by key "
            case .malformedBase64, .nonCanonicalBase64: "malformed signature file: line 2 is not valid base64"
            case .shortSignatureRecord: "malformed signature file: line 2 should decode to 74 bytes, got 71"
            case .truncatedFile: "malformed signature file: expected 4 lines"
            case .truncatedLastLine: "malformed signature file: line 4 is not valid base64"
            case .extraLine:
                "malformed signature file: expected 4 lines (untrusted comment, signature, trusted comment, global signature), got 5"
            case .missingUntrustedPrefix: "malformed signature file: line 1 should start with \"untrusted comment: \""
            case .missingTrustedPrefix: "malformed signature file: line 3 should start with \"trusted comment: \""
            case .carriageReturnInComment: "malformed signature file: line 3 contains the control byte 0x0d"
            case .nulInComment: "malformed signature file: line 1 contains the control byte 0x00"
            case .oversizedFile: "malformed signature file: 65537 bytes, more than the limit of 65536"
            case .unknownAlgorithm: "unknown signature algorithm \"EX\", expected \"ED\" or \"Ed\""
            }
        }

        func apply(to original: Case, signer: SigningKey) -> Case {
            var result = original
            var lines = MinisignFormat.lines(original.signature)
            var record = Base64.decode(lines[1])!
            func setRecord() { lines[1] = Base64.encode(record) }
            switch self {
            case .flippedMessageByte:
                result.message[3] ^= 0x01
            case .appendedMessageByte:
                result.message.append(0x0a)
            case .flippedSignatureByte:
                record[10 + 17] ^= 0x40
                setRecord()
            case .prehashedRelabelledLegacy:
                record[1] = UInt8(ascii: "d")
                setRecord()
            case .flippedTrustedComment:
                lines[2][lines[2].count - 1] ^= 0x01
            case .flippedGlobalSignatureByte:
                var global = Base64.decode(lines[3])!
                global[5] ^= 0x80
                lines[3] = Base64.encode(global)
            case .untrustedKey:
                result.keys = [SigningKey.generate().publicKey]
            case .noTrustedKeys:
                result.keys = []
            case .flippedKeyIDByte:
                record[2] ^= 0x01
                setRecord()
            case .sameKeyIDOtherKey:
                let other = SigningKey(keyIDBytes: signer.keyIDBytes, seed: SecureRandom.bytes(32))
                result.keys = [other.publicKey]
            case .malformedBase64:
                lines[1][8] = UInt8(ascii: "!")
            case .nonCanonicalBase64:
                // 74 bytes encode to a final group with one "="; the character before it has 2 unused
                // bits, always zero from an encoder. "B" sets one of them.
                let last = lines[1].count - 2
                lines[1][last] = lines[1][last] == UInt8(ascii: "B") ? UInt8(ascii: "C") : UInt8(ascii: "B")
            case .shortSignatureRecord:
                record.removeLast(3)
                setRecord()
            case .truncatedFile:
                lines.removeLast()
            case .truncatedLastLine:
                lines[3].removeLast(5)
            case .extraLine:
                lines.append(Array("untrusted comment: more".utf8))
            case .missingUntrustedPrefix:
                lines[0] = Array("comment: signature".utf8)
            case .missingTrustedPrefix:
                lines[2] = Array("trusted-comment: ".utf8) + lines[2].dropFirst(17)
            case .carriageReturnInComment:
                lines[2].insert(UInt8(ascii: "\r"), at: 20)
            case .nulInComment:
                lines[0].append(0)
            case .oversizedFile:
                let size = lines.reduce(0) { $0 + $1.count + 1 }
                lines[0] += [UInt8](repeating: UInt8(ascii: "x"), count: MinisignSignature.sizeLimit + 1 - size)
            case .unknownAlgorithm:
                record[1] = UInt8(ascii: "X")
                setRecord()
            }
            result.signature = lines.flatMap { $0 + [UInt8(ascii: "\n")] }
            return result
        }
    }

    let signer = SigningKey.generate()
    let message = Array("{\"format\": 1, \"sequence\": 42, \"packages\": []}".utf8)

    func signedCase() throws -> Case {
        Case(message: message, signature: try signer.sign(message, trustedComment: "sequence:42"), keys: [signer.publicKey])
    }

    @Test("an untampered signature verifies (the control for every refusal)")
    func untamperedVerifies() throws {
        let signed = try signedCase()
        #expect(
            try SignatureVerifier.verify(message: signed.message, signature: signed.signature, keys: signed.keys, source: "test")
                == "sequence:42")
    }

    @Test("a tampered signature is refused with the reason of its check", arguments: Tampering.allCases)
    func tamperedIsRefused(tampering: Tampering) throws {
        let tampered = tampering.apply(to: try signedCase(), signer: signer)
        let reason = trustRefusalReason {
            _ = try SignatureVerifier.verify(
                message: tampered.message, signature: tampered.signature, keys: tampered.keys, source: "test-source")
        }
        #expect(reason?.hasPrefix(tampering.expectedReason) == true, "reason: \(reason ?? "none")")
    }

    @Test("the untrusted-key refusal names the signing key and the trusted ones")
    func untrustedKeyMessage() throws {
        let signed = try signedCase()
        let other = SigningKey.generate().publicKey
        let reason = trustRefusalReason {
            _ = try SignatureVerifier.verify(
                message: signed.message, signature: signed.signature, keys: [other], source: "test-source")
        }
        #expect(reason == "signed by key \(signer.keyID), which is not trusted (trusted: \(other.keyID))")
        let error = OfflinePkgError.signatureRefused(source: "https://cdn.example/manifest.json", reason: reason ?? "")
        #expect(error.category == .refused)
        #expect("\(error)".hasPrefix("signature check refused manifest https://cdn.example/manifest.json: signed by key"))
    }

    @Test("a changed untrusted comment, CRLF line endings and a missing final newline are accepted")
    func tolerated() throws {
        let signed = try signedCase()
        var lines = MinisignFormat.lines(signed.signature)
        lines[0] = Array("untrusted comment: anyone may rewrite this line".utf8)
        let variants: [[UInt8]] = [
            lines.flatMap { $0 + [UInt8(ascii: "\n")] },
            lines.flatMap { $0 + Array("\r\n".utf8) },
            Array(lines.flatMap { $0 + [UInt8(ascii: "\n")] }.dropLast()),
        ]
        for variant in variants {
            #expect(
                try SignatureVerifier.verify(message: signed.message, signature: variant, keys: signed.keys, source: "test")
                    == "sequence:42")
        }
    }

    @Test("the parser refuses random bytes and prefixes of a valid file without crashing")
    func prefixesAndNoise() throws {
        let signature = try signedCase().signature
        for length in stride(from: 0, to: signature.count - 1, by: 7) {
            let reason = trustRefusalReason {
                _ = try SignatureVerifier.verify(
                    message: message, signature: Array(signature.prefix(length)), keys: [signer.publicKey], source: "test-source")
            }
            #expect(reason?.hasPrefix("malformed signature file: ") == true, "prefix \(length): \(reason ?? "none")")
        }
        for _ in 0..<50 {
            let noise = SecureRandom.bytes(Int.random(in: 0..<400))
            _ = trustRefusalReason {
                _ = try SignatureVerifier.verify(
                    message: message, signature: noise, keys: [signer.publicKey], source: "test-source")
            }
        }
    }
}
