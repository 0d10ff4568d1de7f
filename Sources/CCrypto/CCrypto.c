// libcrypto's functions that offlinepkg calls, as lazy stubs (CSystemShims.h says how), and the
// wrappers of CCrypto.h. Each definition must match OpenSSL's declaration, which the compiler checks; a
// function the Swift code starts to call needs its line here, or the link fails naming it.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "CCrypto.h"
// The soname Debian's libssl3 installs libcrypto under (OpenSSL 3's ABI).
#define CSYSTEMSHIMS_SONAME "libcrypto.so.3"
// One of libcurl's tree, which binds within itself wherever it is opened first (CSystemShims.h).
#define CSYSTEMSHIMS_OWN_SCOPE 1
#include "CSystemShims.h"

LAZY(long, BIO_ctrl, (BIO *a, int b, long c, void *d), (a, b, c, d))
LAZY(int, BIO_free, (BIO *a), (a))
LAZY(BIO *, BIO_new, (const BIO_METHOD *a), (a))
LAZY(BIO *, BIO_new_mem_buf, (const void *a, int b), (a, b))
LAZY(const BIO_METHOD *, BIO_s_mem, (void), ())
LAZY(BIGNUM *, BN_bin2bn, (const unsigned char *a, int b, BIGNUM *c), (a, b, c))
LAZY_VOID(BN_free, (BIGNUM *a), (a))
LAZY(ASN1_INTEGER *, BN_to_ASN1_INTEGER, (const BIGNUM *a, ASN1_INTEGER *b), (a, b))
LAZY_VOID(CRYPTO_free, (void *a, const char *b, int c), (a, b, c))
LAZY_VOID(ERR_error_string_n, (unsigned long a, char *b, size_t c), (a, b, c))
LAZY(unsigned long, ERR_get_error, (void), ())
LAZY(int, EVP_Digest, (const void *a, size_t b, unsigned char *c, unsigned int *d, const EVP_MD *e, ENGINE *f), (a, b, c, d, e, f))
LAZY(int, EVP_DigestFinal_ex, (EVP_MD_CTX *a, unsigned char *b, unsigned int *c), (a, b, c))
LAZY(int, EVP_DigestInit_ex, (EVP_MD_CTX *a, const EVP_MD *b, ENGINE *c), (a, b, c))
LAZY(int, EVP_DigestSign, (EVP_MD_CTX *a, unsigned char *b, size_t *c, const unsigned char *d, size_t e), (a, b, c, d, e))
LAZY(int, EVP_DigestSignInit, (EVP_MD_CTX *a, EVP_PKEY_CTX **b, const EVP_MD *c, ENGINE *d, EVP_PKEY *e), (a, b, c, d, e))
LAZY(int, EVP_DigestUpdate, (EVP_MD_CTX *a, const void *b, size_t c), (a, b, c))
LAZY(int, EVP_DigestVerify, (EVP_MD_CTX *a, const unsigned char *b, size_t c, const unsigned char *d, size_t e), (a, b, c, d, e))
LAZY(int, EVP_DigestVerifyInit, (EVP_MD_CTX *a, EVP_PKEY_CTX **b, const EVP_MD *c, ENGINE *d, EVP_PKEY *e), (a, b, c, d, e))
LAZY_VOID(EVP_MD_CTX_free, (EVP_MD_CTX *a), (a))
LAZY(EVP_MD_CTX *, EVP_MD_CTX_new, (void), ())
LAZY_VOID(EVP_PKEY_CTX_free, (EVP_PKEY_CTX *a), (a))
LAZY(EVP_PKEY_CTX *, EVP_PKEY_CTX_new_id, (int a, ENGINE *b), (a, b))
LAZY(int, EVP_PKEY_CTX_set_ec_paramgen_curve_nid, (EVP_PKEY_CTX *a, int b), (a, b))
LAZY_VOID(EVP_PKEY_free, (EVP_PKEY *a), (a))
LAZY(int, EVP_PKEY_get_base_id, (const EVP_PKEY *a), (a))
LAZY(int, EVP_PKEY_get_raw_private_key, (const EVP_PKEY *a, unsigned char *b, size_t *c), (a, b, c))
LAZY(int, EVP_PKEY_get_raw_public_key, (const EVP_PKEY *a, unsigned char *b, size_t *c), (a, b, c))
LAZY(int, EVP_PKEY_keygen, (EVP_PKEY_CTX *a, EVP_PKEY **b), (a, b))
LAZY(int, EVP_PKEY_keygen_init, (EVP_PKEY_CTX *a), (a))
LAZY(EVP_PKEY *, EVP_PKEY_new_raw_private_key, (int a, ENGINE *b, const unsigned char *c, size_t d), (a, b, c, d))
LAZY(EVP_PKEY *, EVP_PKEY_new_raw_public_key, (int a, ENGINE *b, const unsigned char *c, size_t d), (a, b, c, d))
LAZY(const EVP_MD *, EVP_blake2b512, (void), ())
LAZY(const EVP_MD *, EVP_sha256, (void), ())
LAZY(EVP_PKEY *, PEM_read_bio_PrivateKey, (BIO *a, EVP_PKEY **b, pem_password_cb *c, void *d), (a, b, c, d))
LAZY(X509 *, PEM_read_bio_X509, (BIO *a, X509 **b, pem_password_cb *c, void *d), (a, b, c, d))
LAZY(int, PEM_write_bio_PrivateKey, (BIO *a, const EVP_PKEY *b, const EVP_CIPHER *c, const unsigned char *d, int e, pem_password_cb *f, void *g), (a, b, c, d, e, f, g))
LAZY(int, PEM_write_bio_X509, (BIO *a, const X509 *b), (a, b))
LAZY(int, RAND_bytes, (unsigned char *a, int b), (a, b))
LAZY(int, SHA256_Final, (unsigned char *a, SHA256_CTX *b), (a, b))
LAZY(int, SHA256_Init, (SHA256_CTX *a), (a))
LAZY(int, SHA256_Update, (SHA256_CTX *a, const void *b, size_t c), (a, b, c))
LAZY(X509_EXTENSION *, X509V3_EXT_conf_nid, (struct lhash_st_CONF_VALUE *a, X509V3_CTX *b, int c, const char *d), (a, b, c, d))
LAZY_VOID(X509V3_set_ctx, (X509V3_CTX *a, X509 *b, X509 *c, X509_REQ *d, X509_CRL *e, int f), (a, b, c, d, e, f))
LAZY_VOID(X509_EXTENSION_free, (X509_EXTENSION *a), (a))
LAZY(int, X509_NAME_add_entry_by_txt, (X509_NAME *a, const char *b, int c, const unsigned char *d, int e, int f, int g), (a, b, c, d, e, f, g))
LAZY(int, X509_add_ext, (X509 *a, X509_EXTENSION *b, int c), (a, b, c))
LAZY(int, X509_check_host, (X509 *a, const char *b, size_t c, unsigned int d, char **e), (a, b, c, d, e))
LAZY(int, X509_check_ip_asc, (X509 *a, const char *b, unsigned int c), (a, b, c))
LAZY(int, X509_check_private_key, (const X509 *a, const EVP_PKEY *b), (a, b))
LAZY(int, X509_cmp_time, (const ASN1_TIME *a, time_t *b), (a, b))
LAZY_VOID(X509_free, (X509 *a), (a))
LAZY(const ASN1_TIME *, X509_get0_notAfter, (const X509 *a), (a))
LAZY(EVP_PKEY *, X509_get0_pubkey, (const X509 *a), (a))
LAZY(ASN1_INTEGER *, X509_get_serialNumber, (X509 *a), (a))
LAZY(X509_NAME *, X509_get_subject_name, (const X509 *a), (a))
LAZY(ASN1_TIME *, X509_getm_notAfter, (const X509 *a), (a))
LAZY(ASN1_TIME *, X509_getm_notBefore, (const X509 *a), (a))
LAZY(X509 *, X509_new, (void), ())
LAZY(int, X509_set_issuer_name, (X509 *a, const X509_NAME *b), (a, b))
LAZY(int, X509_set_pubkey, (X509 *a, EVP_PKEY *b), (a, b))
LAZY(int, X509_set_version, (X509 *a, long b), (a, b))
LAZY(int, X509_sign, (X509 *a, EVP_PKEY *b, const EVP_MD *c), (a, b, c))
LAZY(ASN1_TIME *, X509_time_adj_ex, (ASN1_TIME *a, int b, long c, time_t *d), (a, b, c, d))
LAZY(int, i2d_PUBKEY, (const EVP_PKEY *a, unsigned char **b), (a, b))

long ccrypto_bio_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }

void ccrypto_sha256_init(SHA256_CTX *context) { SHA256_Init(context); }

void ccrypto_sha256_update(SHA256_CTX *context, const void *bytes, size_t count) { SHA256_Update(context, bytes, count); }

void ccrypto_sha256_final(SHA256_CTX *context, unsigned char *digest) { SHA256_Final(digest, context); }
