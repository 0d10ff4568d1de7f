internal import CCrypto

/// Ed25519 (RFC 8032, "pure" mode, as libsodium's `crypto_sign_detached`) over OpenSSL's EVP interface.
///
/// Keys cross this boundary as raw bytes: a 32-byte public key, and a 32-byte seed for the private key
/// (libsodium's 64-byte secret key is that seed followed by the public key).
package enum Ed25519 {
    package static let seedLength = 32
    package static let publicKeyLength = 32
    package static let signatureLength = 64

    /// Whether `signature` is a valid signature of `message` by `publicKey`.
    package static func isValidSignature(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard signature.count == signatureLength, publicKey.count == publicKeyLength else { return false }
        guard
            let key = publicKey.withUnsafeBufferPointer({
                EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, $0.baseAddress, $0.count)
            })
        else {
            // Only a wrong length or an allocation failure gets here; either way nothing verifies.
            return false
        }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        // Ed25519 hashes internally: the digest must be NULL, and only the one-shot EVP_DigestVerify works.
        guard EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1 else { return false }
        return withNonNullBytes(message) { messagePointer in
            signature.withUnsafeBufferPointer { signaturePointer in
                EVP_DigestVerify(context, signaturePointer.baseAddress, signature.count, messagePointer, message.count) == 1
            }
        }
    }

    /// The signature of `message` by the private key with this seed.
    package static func signature(of message: [UInt8], seed: [UInt8]) -> [UInt8] {
        precondition(seed.count == seedLength, "an ed25519 seed is 32 bytes")
        let key = seed.withUnsafeBufferPointer {
            EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, $0.baseAddress, $0.count)
        }
        // Any 32 bytes are a valid seed, so only an allocation failure can get here.
        guard let key else { preconditionFailure("openssl could not load an ed25519 private key") }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { preconditionFailure("openssl could not allocate a digest context") }
        defer { EVP_MD_CTX_free(context) }
        precondition(EVP_DigestSignInit(context, nil, nil, nil, key) == 1, "openssl refused ed25519 signing")
        var signature = [UInt8](repeating: 0, count: signatureLength)
        var length = signatureLength
        let status = withNonNullBytes(message) { messagePointer in
            EVP_DigestSign(context, &signature, &length, messagePointer, message.count)
        }
        precondition(status == 1 && length == signatureLength, "openssl failed to produce an ed25519 signature")
        return signature
    }

    /// The public key of the private key with this seed.
    package static func publicKey(seed: [UInt8]) -> [UInt8] {
        precondition(seed.count == seedLength, "an ed25519 seed is 32 bytes")
        let key = seed.withUnsafeBufferPointer {
            EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, $0.baseAddress, $0.count)
        }
        guard let key else { preconditionFailure("openssl could not load an ed25519 private key") }
        defer { EVP_PKEY_free(key) }
        return rawPublicKey(key)
    }

    /// A new key pair from OpenSSL's CSPRNG.
    package static func generateKeyPair() -> (seed: [UInt8], publicKey: [UInt8]) {
        // EVP_PKEY_Q_keygen is variadic, which Swift does not import; this is its long form.
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else {
            preconditionFailure("openssl could not allocate a key generation context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        precondition(
            EVP_PKEY_keygen_init(context) == 1 && EVP_PKEY_keygen(context, &key) == 1 && key != nil,
            "openssl failed to generate an ed25519 key")
        defer { EVP_PKEY_free(key) }
        var seed = [UInt8](repeating: 0, count: seedLength)
        var length = seedLength
        precondition(
            EVP_PKEY_get_raw_private_key(key, &seed, &length) == 1 && length == seedLength,
            "openssl failed to export an ed25519 private key")
        return (seed, rawPublicKey(key!))
    }

    private static func rawPublicKey(_ key: OpaquePointer) -> [UInt8] {
        var publicKey = [UInt8](repeating: 0, count: publicKeyLength)
        var length = publicKeyLength
        precondition(
            EVP_PKEY_get_raw_public_key(key, &publicKey, &length) == 1 && length == publicKeyLength,
            "openssl failed to export an ed25519 public key")
        return publicKey
    }

    /// An empty array may have no storage; OpenSSL's Ed25519 wants a pointer even for zero bytes.
    private static func withNonNullBytes<R>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>) -> R) -> R {
        if bytes.isEmpty {
            var placeholder: UInt8 = 0
            return body(&placeholder)
        }
        return bytes.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// Cryptographically secure random bytes from OpenSSL's DRBG.
package enum SecureRandom {
    package static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        precondition(RAND_bytes(&bytes, Int32(count)) == 1, "openssl's random generator failed")
        return bytes
    }
}
