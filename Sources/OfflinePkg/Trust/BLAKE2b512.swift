internal import CCrypto

/// BLAKE2b with a 64-byte output, unkeyed: what minisign's prehashed `ED` signatures sign
/// (libsodium's `crypto_generichash` with `crypto_generichash_BYTES_MAX`).
enum BLAKE2b512 {
    static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 64)
        var length: UInt32 = 0
        let status = bytes.withUnsafeBytes { buffer in
            EVP_Digest(buffer.baseAddress, buffer.count, &digest, &length, EVP_blake2b512(), nil)
        }
        precondition(status == 1 && length == 64, "openssl failed to compute blake2b-512")
        return digest
    }
}
