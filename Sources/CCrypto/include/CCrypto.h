#ifndef OFFLINEPKG_CCRYPTO_H
#define OFFLINEPKG_CCRYPTO_H
// libcrypto, loaded at the first hash, signature or certificate (CCrypto.c): `lookup`, `status` and
// `--version` never map it (its start-up is about three million instructions, more than the rest of a
// lookup).
#include <stddef.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

// BIO_get_mem_data is a macro over BIO_ctrl, which Swift does not import.
long ccrypto_bio_mem_data(BIO *bio, char **data);

// SHA-256 without EVP. EVP_DigestInit_ex fetches the digest from a provider: the first fetch in a
// process builds OpenSSL's method store (about three million instructions, a tenth of a no-op sync),
// and every later one still takes its locks and references, once per file of an unpack. These run the
// same assembly (SHA-NI where the CPU has it) on a context of the caller's. OpenSSL 3 deprecates the
// functions without removing them; wrapped here, Swift sees no deprecation.
void ccrypto_sha256_init(SHA256_CTX *context);
void ccrypto_sha256_update(SHA256_CTX *context, const void *bytes, size_t count);
void ccrypto_sha256_final(SHA256_CTX *context, unsigned char *digest);
#endif
